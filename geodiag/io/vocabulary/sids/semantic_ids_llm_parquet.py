"""semantic-ids-llm's item table (notebook 06): ``parent_asin``, ``semantic_id_0`` ..
``semantic_id_k`` (int64; the last a counter telling apart items that share the others)
and ``semantic_id``, the same digits joined by ``-``. Its vocabulary spells them flat,
``<|sid_{level * 256 + code}|>`` between ``<|sid_start|>`` and ``<|sid_end|>``. Read by
row groups."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from geodiag.io.vocabulary.sids import parquet
from geodiag.io.vocabulary.sids.base import SPELLINGS, Dialect, SidMap, head_of, register_map

FRAMEWORK = "semantic-ids-llm"
_DIGIT = re.compile(r"^semantic_id_(\d+)$")


def _digit_columns(names: list[str]) -> list[str]:
    found = sorted((int(m[1]), n) for n in names if (m := _DIGIT.match(n)))
    return [n for i, (k, n) in enumerate(found) if k == i]


def sniff(path: Path, head: bytes) -> bool:
    names = parquet.columns(path, head)
    return names is not None and "parent_asin" in names and bool(_digit_columns(names))


def stream(path: Path) -> Iterator[tuple[list[str], np.ndarray]]:
    digits = _digit_columns(parquet.columns(path, head_of(path)) or [])
    for batch in parquet.iter_columns(path, ["parent_asin", *digits]):
        codes = np.column_stack([np.asarray(batch[d].to_numpy(), dtype=np.int64) for d in digits])
        yield parquet.text_ids(batch["parent_asin"]), codes


def read(path: Path) -> SidMap:
    return parquet.read_streamed(
        path, stream, "semantic-ids-llm.parquet", FRAMEWORK, SPELLINGS["flat"]
    )


DIALECT = register_map(
    Dialect(
        "semantic-ids-llm.parquet",
        FRAMEWORK,
        sniff,
        read,
        usual_names=("*_items_with_semantic_ids.parquet", "*semantic_ids*.parquet"),
        stream=stream,
    )
)
