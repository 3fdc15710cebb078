"""OpenOneRec's ``*_codes.parquet`` (``tokenizer/infer_res_kmeans.py``): ``pid`` and
``codes``, a list of int64 per item (``pd.DataFrame({'pid': ..., 'codes':
codes.tolist()}).to_parquet``), 0-based, spelled ``<s_a_12>`` in its vocabulary; a
``sid`` column (the same list) is read alike. Read by row groups."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.io.vocabulary.sids import parquet
from geodiag.io.vocabulary.sids.base import SPELLINGS, Dialect, SidMap, head_of, register_map

FRAMEWORK = "OpenOneRec"


def _code_column(names: list[str]) -> str | None:
    return next((c for c in ("codes", "sid") if c in names), None)


def sniff(path: Path, head: bytes) -> bool:
    names = parquet.columns(path, head)
    return names is not None and "pid" in names and _code_column(names) is not None


def stream(path: Path) -> Iterator[tuple[list[str], np.ndarray]]:
    column = _code_column(parquet.columns(path, head_of(path)) or [])
    for batch in parquet.iter_columns(path, ["pid", column]):
        lists = batch[column]
        try:
            flat = np.asarray(lists.flatten().to_numpy(zero_copy_only=False), dtype=np.int64)
            codes = flat.reshape(len(lists), -1)
        except ValueError:
            raise InputError(
                path, f"column '{column}': items hold different numbers of codes"
            ) from None
        yield parquet.text_ids(batch["pid"]), codes


def read(path: Path) -> SidMap:
    return parquet.read_streamed(
        path, stream, "openonerec.parquet", FRAMEWORK, SPELLINGS["s_letter"]
    )


DIALECT = register_map(
    Dialect(
        "openonerec.parquet",
        FRAMEWORK,
        sniff,
        read,
        usual_names=("*_codes.parquet",),
        stream=stream,
    )
)
