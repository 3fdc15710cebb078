"""What the callback does to each checkpoint the Trainer saves: describe it, gate it.

The description is the contract's (DESIGN.md): ``semantic_ids.json`` and
``codebooks.safetensors``, written by :func:`geodiag.io.vocabulary.sidecar.write_description`, as gti
writes them, so that ``geodiag check|report run/checkpoint-*`` need no flags. The gate is
``geodiag check``'s, on the folder, or on the model in memory where the folder is no
full model (a PEFT adapter).
"""

from __future__ import annotations

import os
from pathlib import Path

from transformers.utils import logging

from geodiag.analysis.checkpoint import measure_checkpoint
from geodiag.analysis.options import GATE_MEASURE, AnalyzeOptions
from geodiag.analysis.reports import CheckpointReport
from geodiag.atomic import atomic_write
from geodiag.callback.distributed import partitioned
from geodiag.errors import InputError
from geodiag.gate.checks import GateConfig, GateResult
from geodiag.gate.verdict import judge
from geodiag.io.vocabulary import sidecar
from geodiag.io.vocabulary.new_tokens import declare

logger = logging.get_logger(__name__)
CHECK_FILENAME = "geodiag_check.json"
WRITTEN_BY = "geodiag.callback.GeodiagCallback"


def describe_checkpoint(
    folder: Path, step: int, levels, codebooks, base_vocab_size: int | None
) -> None:
    """The sidecar and codebooks a reader of ``folder`` needs, unless it has a sidecar or
    no levels are known. codebooks: a file, {level: array or tensor}, or None (with a
    sidecar for ``levels``: its ``codebooks.safetensors``, when there is one)."""
    if levels is None or (folder / sidecar.FILENAME).exists():
        return
    declared = declare(None, levels, base_vocab_size)
    by_level, side_path = declared.by_level, declared.levels_path
    given = levels if isinstance(levels, sidecar.SemanticIds) else None  # e.g. from --sids
    items = given.items if given is not None else sidecar.load(side_path).items if side_path else {}
    level_list = (
        [
            sidecar.Level(lv.name, lv.size, list(lv.token_ids), list(lv.tokens))
            for lv in given.levels
        ]
        if given is not None  # its sizes and ids as the map has them (codes without a token: -1)
        else [sidecar.Level(name, len(v), [int(i) for i in v]) for name, v in by_level.items()]
    )
    base = declared.base
    prov = {"step": step, "written_by": WRITTEN_BY}
    books = codebooks
    if books is None and side_path is not None:
        beside = side_path.parent / sidecar.CODEBOOKS_FILENAME
        books = beside if beside.is_file() else None
    if books is not None and not isinstance(books, str | os.PathLike):
        books = {k: _numpy(v) for k, v in books.items()}
    sids = sidecar.SemanticIds(base, level_list, items, prov)
    sidecar.write_description(folder, sids, books)


def _numpy(x):
    return x.detach().cpu().numpy() if hasattr(x, "detach") else x


def reads_memory(folder: Path) -> bool:
    """An adapter folder (or no folder) is measured from the model in memory."""
    return not folder.is_dir() or (folder / "adapter_config.json").is_file()


def gate_saved(
    folder: Path, model, gate: GateConfig, seed: int, source: dict
) -> tuple[GateResult, CheckpointReport, str]:
    """(GateResult, CheckpointReport, what was measured) for a saved checkpoint.
    source: the keywords of :func:`geodiag.api.open_source` (new_ids, levels, ...)."""
    from geodiag.api import open_source

    opts = AnalyzeOptions(seed=seed, **GATE_MEASURE)
    if not reads_memory(folder):
        try:
            report = measure_checkpoint(open_source(folder, **source), opts)
            return judge(report, gate), report, str(folder)
        except InputError as e:
            # In memory instead, unless that needs a gather the other ranks won't join.
            if model is None or partitioned(model):
                raise
            logger.warning(
                "geodiag: reading %s failed (%s); measuring the model in memory", folder, e
            )
    if model is None:
        raise InputError(folder, "no model to measure")
    from geodiag.io.formats.memory import gathered

    with gathered(model):
        report = measure_checkpoint(open_source(model, **source), opts)
    return judge(report, gate), report, "model in memory"


def write_check(folder: Path, result: GateResult, gate: GateConfig, measured: str) -> None:
    """``geodiag_check.json``: the save-time gate's result, in the checkpoint folder."""
    from geodiag.jsonio import dumps

    summary = {"passed": result.passed, "measured": measured, "gate_config": gate, "result": result}
    atomic_write(folder / CHECK_FILENAME, dumps(summary) + "\n")
