"""``geodiag check`` of a drop-in output as the user would run it: ``geodiag check OUT
--sids INDEX --codebooks CODEBOOKS`` (geodiag reads the framework's files itself)."""

from __future__ import annotations

from pathlib import Path

from geodiag.api import check
from geodiag.io.sources.options import ReadOptions
from geodiag.jsonio import to_jsonable
from geodiag.outputs.ci import text_summary
from gti.dropin.index import IndexTokens


def gate_of(folder: Path, shown_as: Path, index: IndexTokens) -> tuple[str, object]:
    """(the terminal summary, the result as JSON) of the gate on the written ``folder``."""
    books = None if index.codebooks_path is None else Path(index.codebooks_path).resolve()
    # Absolute: relative to the working directory, as the user typed them (geodiag would
    # otherwise look for a relative --sids beside the checkpoint it reads).
    read = ReadOptions(sids=Path(index.path).resolve(), codebooks=books, sid_offset=index.offset)
    result = check(folder, read=read)
    result.path = str(shown_as)
    return text_summary(result), to_jsonable(result)
