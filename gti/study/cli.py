"""``gti study run`` / ``gti study assemble`` and ``gti baselines``: thin typer commands."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from geodiag.command_line import App
from gti.errors import exits_on_bad_input
from gti.evaluate.stats import DEFAULT_RESAMPLES

study_app = App(help="The learning-curve study (configs/study.toml): runs, then tables and plots.")


@study_app.command("run", example="gti study run configs/study.toml --arm gti --seed 0")
@exits_on_bad_input
def study_run(
    config: Annotated[Path, typer.Argument(help="Study TOML, e.g. configs/study.toml.")],
    arm: Annotated[str | None, typer.Option(help="One arm (default: every arm).")] = None,
    seed: Annotated[int | None, typer.Option(help="One seed (default: every seed).")] = None,
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
    cache_dir: Annotated[
        Path | None, typer.Option("--cache-dir", help="Cache root (default: ~/.cache/gti).")
    ] = None,
) -> None:
    """Run (or resume) the study's (arm, seed) runs.

    Each writes its small outputs under <reports>/runs/<arm>-seed<k>/ (commit them).
    Without --arm/--seed: every run, mean and gti first over all seeds; finished runs
    are skipped."""
    import shlex
    import sys

    from gti.experiment.runner import torch_threads
    from gti.study.config import load_study_config
    from gti.study.run import run_all, run_one

    cfg = load_study_config(config)
    cfg.progress, cfg.cache_dir = progress, cache_dir
    command = "gti study run " + " ".join(shlex.quote(a) for a in sys.argv[3:])
    with torch_threads(cfg.threads):
        if arm is None and seed is None:
            dirs = run_all(cfg, command=command)
        else:
            from geodiag.errors import InputError

            if arm is None or seed is None:
                raise InputError("--arm/--seed", "give both, or neither for every run")
            if arm not in cfg.arms or seed not in cfg.seeds:
                raise InputError("--arm/--seed", f"{arm!r} seed {seed} is not in {config}")
            dirs = [run_one(cfg, arm, seed, command=command)]
    for d in dirs:
        typer.echo(str(d))


@study_app.command("assemble", example="gti study assemble reports/study")
@exits_on_bad_input
def study_assemble(
    folder: Annotated[Path, typer.Argument(help="The study's reports folder.")],
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples.")] = DEFAULT_RESAMPLES,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
) -> None:
    """Write results.md, results.json and the plots from the committed files alone."""
    from gti.study.assemble import assemble

    for name, path in assemble(folder, n_resamples=resamples, seed=seed).items():
        typer.echo(f"{name}: {path}")


@study_app.command("geometry-intervals", example="gti study geometry-intervals configs/study.toml")
@exits_on_bad_input
def study_geometry_intervals(
    config: Annotated[Path, typer.Argument(help="Study TOML, e.g. configs/study.toml.")],
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples.")] = 2_000,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """RSA per level with 95% intervals over seeds and codes, from the runs' weights.

    Differences gti - other arm and final - init, from the weights of the complete runs
    in the study's work folder; writes <reports>/geometry_intervals.json (commit it;
    assemble adds its table)."""
    import json

    from geodiag.atomic import atomic_write
    from geodiag.errors import InputError
    from gti.experiment.layout import Files, study_runs
    from gti.study.config import load_study_config
    from gti.study.geometry_intervals import (
        check_against_runs,
        intervals,
        study_checkpoints,
        to_markdown,
    )

    cfg = load_study_config(config)
    checkpoints, notes = study_checkpoints(cfg)
    for note in notes:
        typer.echo(f"left out: {note}", err=True)
    if not checkpoints:
        raise InputError(cfg.work, "no complete run has its weights here: nothing to measure")
    doc = intervals(checkpoints, n_resamples=resamples, seed=seed, progress=progress)
    doc["left_out"] = notes
    problems = check_against_runs(doc, study_runs(cfg.reports))
    if problems:
        raise InputError(
            study_runs(cfg.reports),
            "RSA recomputed from the weights differs from the runs' geometry.json ("
            + "; ".join(problems[:3])
            + "): are these the weights of the committed runs?",
        )
    out = Path(cfg.reports) / Files.GEOMETRY_INTERVALS
    atomic_write(out, json.dumps(doc, indent=1, allow_nan=False) + "\n")
    typer.echo("\n".join(to_markdown(doc, [])))
    typer.echo(f"wrote {out} ({doc['seconds']} s)")


@exits_on_bad_input
def baselines(
    out: Annotated[Path, typer.Option("-o", "--out", help="Output folder.")],
    data: Annotated[str, typer.Option(help="Dataset (as gti sft --data).")] = "movielens-100k",
    baseline: Annotated[
        list[str] | None,
        typer.Option(help="most-popular | transitions | sasrec (repeat; default: the first two)."),
    ] = None,
    k_core: Annotated[
        int, typer.Option(help="Keep users/items with >= this many events, as the LM arms.")
    ] = 5,
    max_history: Annotated[int, typer.Option(help="History length of the split.")] = 20,
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples.")] = DEFAULT_RESAMPLES,
    export_recbole: Annotated[
        Path | None,
        typer.Option(help="Also write the split as RecBole benchmark files into this folder."),
    ] = None,
    summarize: Annotated[
        Path | None,
        typer.Option(help="Only write metrics.json for this folder of rankings files (SASRec)."),
    ] = None,
    cache_dir: Annotated[
        Path | None, typer.Option("--cache-dir", help="Cache root (default: ~/.cache/gti).")
    ] = None,
) -> None:
    """Baselines on the leave-one-out split: per-user top-20 lists and metrics with
    95% bootstrap intervals, per baseline and split."""
    import json

    from gti.baselines.run import load_split, run_baselines, summarize_folder

    if summarize is not None:
        m = summarize_folder(summarize, n_resamples=resamples)
        for split, s in m["splits"].items():
            cells = {k: round(v["estimate"], 4) for k, v in s["metrics"].items()}
            typer.echo(f"{m['baseline']} {split}: {json.dumps(cells)}")
        return
    if export_recbole is not None:
        from gti.baselines.recbole_export import write_benchmark_files

        sd = load_split(data, k_core_min=k_core, max_history=max_history, cache_dir=cache_dir)
        for p in write_benchmark_files(sd.splits, export_recbole, export_recbole.name):
            typer.echo(f"wrote {p}")

    res = run_baselines(
        data,
        out,
        baselines=tuple(baseline or ("most-popular", "transitions")),
        k_core_min=k_core,
        max_history=max_history,
        n_resamples=resamples,
        cache_dir=cache_dir,
    )
    for name, m in res.items():
        for split, s in m["splits"].items():
            cells = {k: round(v["estimate"], 4) for k, v in s["metrics"].items()}
            typer.echo(f"{name} {split}: {json.dumps(cells)}")
