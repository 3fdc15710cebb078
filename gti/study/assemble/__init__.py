"""``assemble``: results.md, results.json and the plots of a study, from its committed
small files alone (``runs/*/`` and ``baselines/*/``): no weights, no model, no data.

Read (:mod:`.inputs`: the runs' run.json as :class:`~.inputs.Run`, the baselines'
lists), computed (:mod:`.collect`: a strict-JSON dict, the content of results.json),
rendered (:mod:`.tables`: results.md, one function per table; :mod:`.plots`: one
function per figure). Rebuild a study's committed tables and plots with
``gti study assemble reports/ml100k-study``.
"""

from __future__ import annotations

import json
from pathlib import Path

from gti.evaluate.stats import DEFAULT_RESAMPLES
from gti.experiment.layout import Files
from gti.study.assemble.collect import collect
from gti.study.assemble.plots import plot
from gti.study.assemble.tables import to_markdown

__all__ = ["assemble", "collect", "plot", "to_markdown"]


def assemble(root: Path, *, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> dict[str, Path]:
    """Write results.json, results.md and the plots into ``root``; returns their paths."""
    from geodiag.atomic import atomic_write

    root = Path(root)
    res = collect(root, n_resamples=n_resamples, seed=seed)
    js, md = root / Files.RESULTS_JSON, root / Files.RESULTS_MD
    atomic_write(js, json.dumps(res, indent=1, allow_nan=False) + "\n")
    atomic_write(md, to_markdown(res))
    pngs = plot(res, root)
    return {js.name: js, md.name: md, **{p.name: p for p in pngs}}
