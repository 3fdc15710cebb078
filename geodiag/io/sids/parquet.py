"""Parquet SID tables through pyarrow (the ``sids`` extra), imported only when a
``.parquet`` is read: the schema's column names (what the dialects sniff), and columns
read by row groups, so a 10-million-item table streams (``iter_columns``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from geodiag.errors import MissingExtra, require_extra

PARQUET_MAGIC = b"PAR1"
INSTALL = "pip install 'geodiag[sids]'"


def _pq():  # noqa: ANN202  (pyarrow.parquet)
    require_extra("--sids", "pyarrow to read a parquet SID table", ["pyarrow"], INSTALL)
    import pyarrow.parquet as pq

    return pq


def columns(path: Path, head: bytes) -> list[str] | None:
    """The table's column names; None when it is no parquet file. Without pyarrow a
    parquet file raises :class:`MissingExtra` (the command names what to install)."""
    if not head.startswith(PARQUET_MAGIC):
        return None
    return list(_pq().read_schema(path).names)


def iter_columns(path: Path, names: list[str], batch_rows: int = 65_536) -> Iterator[dict]:
    """``{name: list of values}`` for ``names``, ``batch_rows`` rows at a time."""
    f = _pq().ParquetFile(path)
    for batch in f.iter_batches(batch_size=batch_rows, columns=names):
        yield {n: batch.column(n) for n in names}


__all__ = ["MissingExtra", "PARQUET_MAGIC", "columns", "iter_columns"]
