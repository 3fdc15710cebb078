"""TorchEasyRec's SID table (``tzrec.predict`` of a ``sid_rqvae`` / ``sid_rqkmeans`` model,
``--reserved_columns item_id``): one row per item, ``codes`` (``array<int64>``, one code
per residual level, 0-based) and ``item_id`` passed through, written by its
``ParquetWriter`` as ``part-{rank}.parquet``. pyarrow's CSV writer takes no list column,
so a CSV table holds ``codes`` as the comma-delimited text its ``evaluate_sid_quality``
tool reads (``"8,31,26"``, brackets allowed). TorchEasyRec names no tokens: they are
spelled as the tokenizer holds them, as for an integer matrix. Parquet through pyarrow
(the ``sids`` extra); CSV through the standard library. Both read by blocks of rows."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.io.vocabulary.sids import files, parquet
from geodiag.io.vocabulary.sids.base import Dialect, SidMap, codes_matrix, register_map

FRAMEWORK = "TorchEasyRec"
COLUMNS = ("item_id", "codes")
BLOCK_ROWS = 65_536


def _csv_header(head: bytes) -> list[str] | None:
    if head.startswith(parquet.PARQUET_MAGIC) or b"\n" not in head:
        return None
    try:
        line = head.split(b"\n", 1)[0].decode("utf-8")
    except UnicodeDecodeError:
        return None
    return next(csv.reader([line]), None)


def sniff(path: Path, head: bytes) -> bool:
    names = parquet.columns(path, head) or _csv_header(head)
    return names is not None and all(c in names for c in COLUMNS)


def _parse_text(path: Path, ids: list[str], texts: list[object]) -> np.ndarray:
    """Comma-delimited codes (``"8,31,26"`` or ``"[8, 31, 26]"``) as (n, levels) int64."""
    rows = []
    for item, text in zip(ids, texts, strict=True):
        try:
            rows.append([int(v) for v in str(text).strip().strip("[]").split(",")])
        except ValueError:
            raise InputError(
                path, f"item {item!r}: codes {str(text)[:40]!r} are not comma-delimited integers"
            ) from None
    if len({len(r) for r in rows}) > 1:
        n = len(rows[0])
        r = next(i for i, row in enumerate(rows) if len(row) != n)
        raise InputError(path, f"item {ids[r]!r}: {len(rows[r])} codes where items hold {n}")
    return np.array(rows, dtype=np.int64).reshape(len(rows), -1)


def _stream_parquet(path: Path) -> Iterator[tuple[list[str], np.ndarray]]:
    import pyarrow as pa

    for batch in parquet.iter_columns(path, list(COLUMNS), BLOCK_ROWS):
        ids, lists = parquet.text_ids(batch["item_id"]), batch["codes"]
        if pa.types.is_string(lists.type) or pa.types.is_large_string(lists.type):
            yield ids, _parse_text(path, ids, lists.to_pylist())
            continue
        if not pa.types.is_list(lists.type) and not pa.types.is_large_list(lists.type):
            raise InputError(path, f"column 'codes' is {lists.type}, not a list of integers")
        widths = np.diff(np.asarray(lists.offsets))
        if len(widths) and (widths != widths[0]).any():
            r = int(np.flatnonzero(widths != widths[0])[0])
            raise InputError(
                path, f"item {ids[r]!r}: {widths[r]} codes where items hold {widths[0]}"
            )
        flat = np.asarray(lists.flatten().to_numpy(zero_copy_only=False), dtype=np.int64)
        yield ids, flat.reshape(len(lists), -1)


def _stream_csv(path: Path) -> Iterator[tuple[list[str], np.ndarray]]:
    with files.reading(path), files.open_text(path) as f:
        reader = csv.DictReader(f)
        ids: list[str] = []
        texts: list[object] = []
        for row in reader:
            ids.append(row["item_id"])
            texts.append(row["codes"])
            if len(ids) == BLOCK_ROWS:
                yield ids, _parse_text(path, ids, texts)
                ids, texts = [], []
        if ids:
            yield ids, _parse_text(path, ids, texts)


def stream(path: Path) -> Iterator[tuple[list[str], np.ndarray]]:
    if parquet.columns(path, files.sniffed_head(path, 4)) is not None:
        yield from _stream_parquet(path)
    else:
        yield from _stream_csv(path)


def read(path: Path) -> SidMap:
    items: list[str] = []
    chunks = []
    for ids, codes in stream(path):
        if chunks and codes.shape[1] != chunks[0].shape[1]:
            raise InputError(
                path,
                f"item {ids[0]!r}: {codes.shape[1]} codes where items hold {chunks[0].shape[1]}",
            )
        items += ids
        chunks.append(codes)
    if not items:
        raise InputError(path, "a TorchEasyRec SID table with no rows")
    return codes_matrix(
        path,
        np.concatenate(chunks),
        dialect="torcheasyrec",
        framework=FRAMEWORK,
        items_along_rows=True,
        item_ids=items,
    )


# No usual name: tzrec.predict writes part-{rank}.parquet into its output folder, not
# beside an LM's weights, and that name says nothing of what a file holds.
DIALECT = register_map(Dialect("torcheasyrec", FRAMEWORK, sniff, read, stream=stream))
