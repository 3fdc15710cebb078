"""Parquet SID tables through pyarrow (the ``sids`` extra), imported only when a
``.parquet`` is read: the schema's column names (what the dialects sniff), and columns
read by row groups, so a 10-million-item table streams (``iter_columns``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from geodiag.errors import InputError, MissingExtra, require_extra
from geodiag.io.vocabulary.sids.base import SidMap, Spelling, codes_matrix

PARQUET_MAGIC = b"PAR1"
INSTALL = "pip install 'geodiag[sids]'"


def _pq():  # noqa: ANN202  (pyarrow.parquet)
    require_extra("--sids", "pyarrow to read a parquet SID table", ["pyarrow"], INSTALL)
    import pyarrow.parquet as pq

    return pq


class _arrow_errors:  # noqa: N801  (a context manager)
    """pyarrow's errors reading ``path`` (a corrupt page, a bad footer) as InputErrors
    naming it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type | None, e: BaseException | None, tb: object) -> bool:
        import pyarrow as pa

        if isinstance(e, pa.ArrowException | OSError) and not isinstance(e, InputError):
            text = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise InputError(self.path, f"not a readable parquet file ({text})") from None
        return False


def columns(path: Path, head: bytes) -> list[str] | None:
    """The table's column names; None when it is no parquet file. Without pyarrow a
    parquet file raises :class:`MissingExtra` (the command names what to install)."""
    if not head.startswith(PARQUET_MAGIC):
        return None
    pq = _pq()
    with _arrow_errors(path):
        return list(pq.read_schema(path).names)


def iter_columns(path: Path, names: list[str], batch_rows: int = 65_536) -> Iterator[dict]:
    """``{name: list of values}`` for ``names``, ``batch_rows`` rows at a time."""
    pq = _pq()
    with _arrow_errors(path):
        f = pq.ParquetFile(path)
        for batch in f.iter_batches(batch_size=batch_rows, columns=names):
            yield {n: batch.column(n) for n in names}


def text_ids(column) -> list[str]:  # noqa: ANN001  (a pyarrow array)
    """Item ids as text: a string column as it is, any other cast (integer pids)."""
    import pyarrow as pa

    if not pa.types.is_string(column.type) and not pa.types.is_large_string(column.type):
        column = column.cast(pa.string())
    return column.to_pylist()


__all__ = ["MissingExtra", "PARQUET_MAGIC", "columns", "iter_columns", "text_ids"]


def read_streamed(
    path: Path,
    stream: Callable[[Path], Iterator[tuple[list[str], np.ndarray]]],
    dialect: str,
    framework: str,
    spelling: Spelling,
) -> SidMap:
    """A whole table from its dialect's ``stream`` of (item ids, codes) batches: one
    item per row, spelled as that framework spells its tokens."""
    items: list[str] = []
    chunks = []
    for ids, codes in stream(path):
        items += ids
        chunks.append(codes)
    sids = codes_matrix(
        path,
        np.concatenate(chunks),
        dialect=dialect,
        framework=framework,
        items_along_rows=True,
        item_ids=items,
    )
    return SidMap(**{**sids.__dict__, "spelling": spelling})
