"""``gti experiment``: a thin typer command; register it with
``app.command("experiment")(experiment)``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gti.errors import exits_on_bad_input


@exits_on_bad_input
def experiment(
    config: Annotated[
        Path,
        typer.Argument(help="Experiment TOML, e.g. configs/demo.toml (see configs/README.md)."),
    ],
    out: Annotated[
        Path | None, typer.Option("-o", "--out", help="Output folder (overrides the TOML's `out`).")
    ] = None,
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
    cache_dir: Annotated[
        Path | None,
        typer.Option("--cache-dir", help="Cache root (default: $GTI_CACHE or ~/.cache/gti)."),
    ] = None,
) -> None:
    """Every arm: SIDs once, then init -> SFT -> evaluate per seed, a results table and a report.

    The geodiag report shows every arm at both stages. Idempotent: finished stages are
    skipped and an interrupted stage resumes, so after a kill, run the same command again. Prints, last, each arm's geometry verdict and the
    report's path (gti.experiment.summary).
    """
    from gti.experiment.config import load_config
    from gti.experiment.runner import final_screen, run_experiment

    cfg = load_config(config, out=out)
    cfg.progress, cfg.cache_dir = progress, cache_dir
    result = run_experiment(cfg)
    typer.echo(f"results: {result.results_md}\n")
    typer.echo(final_screen(cfg, result))
