"""``geodiag check`` of a drop-in output as the user would run it: ``geodiag check OUT
--sids INDEX --codebooks CODEBOOKS`` (geodiag reads the framework's files itself)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from geodiag.analysis.checkpoint import measure_checkpoint
from geodiag.analysis.options import GATE_MEASURE, AnalyzeOptions
from geodiag.gate.checks import GateConfig
from geodiag.gate.verdict import judge
from geodiag.io.sources.options import ReadOptions
from geodiag.jsonio import to_jsonable
from geodiag.outputs.ci import check_text
from gti.dropin.index import IndexTokens


def gate_of(folder: Path, shown_as: Path, index: IndexTokens) -> tuple[str, object]:
    """(what ``geodiag check`` prints, the result as JSON) of the gate on the written
    ``folder``, named ``shown_as``: the checks, the notes and the verdict line, which names
    the cause and the remedy of a FAIL."""
    books = None if index.codebooks_path is None else Path(index.codebooks_path).resolve()
    # Absolute: relative to the working directory, as the user typed them (geodiag would
    # otherwise look for a relative --sids beside the checkpoint it reads).
    read = ReadOptions(sids=Path(index.path).resolve(), codebooks=books, sid_offset=index.offset)
    analysis = dataclasses.replace(AnalyzeOptions(), **GATE_MEASURE)  # as `geodiag check`
    report = measure_checkpoint(folder, analysis, read=read)
    result = judge(report, GateConfig())
    result.path = str(shown_as)
    return check_text(report, result).replace(str(folder), str(shown_as)), to_jsonable(result)
