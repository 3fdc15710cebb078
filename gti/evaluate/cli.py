"""``gti evaluate``: a thin typer command; register it with ``app.command("evaluate")(evaluate)``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from gti.errors import exits_on_bad_input
from gti.evaluate.config import SPLITS, EvalConfig

D = EvalConfig  # defaults


@exits_on_bad_input
def evaluate(
    checkpoint: Annotated[Path, typer.Argument(help="Checkpoint written by `gti sft`.")],
    out: Annotated[
        Path | None, typer.Option("-o", "--out", help="Write every number to this JSON file.")
    ] = None,
    data: Annotated[
        str | None, typer.Option(help="Dataset (default: the one the SIDs were built from).")
    ] = None,
    split: Annotated[
        list[str] | None, typer.Option(help=f"{' | '.join(SPLITS)} (repeatable; default both).")
    ] = None,
    k: Annotated[
        list[int] | None, typer.Option(help="K of Recall@K/NDCG@K (repeatable; default 1 5 10 20).")
    ] = None,
    beams: Annotated[int, typer.Option(help="Beam size (>= the largest K).")] = D.beams,
    exact: Annotated[
        bool,
        typer.Option("--exact", help="Score every item of the catalog instead of beam search."),
    ] = D.exact,
    batch_size: Annotated[int, typer.Option(help="Users per forward pass.")] = D.batch_size,
    max_users: Annotated[
        int | None, typer.Option(help="Evaluate a seeded sample of this many users.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the user sample.")] = D.seed,
    k_core: Annotated[
        int | None, typer.Option(help="Default: as the checkpoint was trained.")
    ] = None,
    max_history: Annotated[
        int | None, typer.Option(help="Default: as the checkpoint was trained.")
    ] = None,
    titles: Annotated[
        bool | None, typer.Option("--titles/--no-titles", help="Default: as trained.")
    ] = None,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda.")] = D.device,
    dtype: Annotated[
        str, typer.Option(help="float32 | float64 (weights and arithmetic; float64 for checks).")
    ] = D.dtype,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
    cache_dir: Annotated[
        Path | None,
        typer.Option("--cache-dir", help="Cache root (default: $GTI_CACHE or ~/.cache/gti)."),
    ] = None,
) -> None:
    """Recall@K and NDCG@K on the leave-one-out validation and test users.

    Items come from beam search constrained to the catalog's SID prefix trie (only
    real items can come out), or with --exact from scoring every item. Prints the
    metrics as JSON.
    """
    from gti.evaluate.run import run_evaluate

    cfg = EvalConfig(
        checkpoint=checkpoint,
        out=out,
        data=data,
        splits=tuple(split) if split else D.splits,
        ks=tuple(k) if k else D.ks,
        beams=beams,
        exact=exact,
        batch_size=batch_size,
        max_users=max_users,
        seed=seed,
        k_core=k_core,
        max_history=max_history,
        titles=titles,
        device=device,
        dtype=dtype,
        cache_dir=cache_dir,
        progress=progress,
    )
    result = run_evaluate(cfg)
    summary = {s: {"n_users": r.n_users, **r.metrics} for s, r in result.splits.items()}
    typer.echo(json.dumps(summary, indent=1))
