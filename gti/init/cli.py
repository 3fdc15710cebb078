"""``gti init``: a thin typer command; register it with ``app.command("init")(init)``."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from gti.errors import exits_on_bad_input
from gti.init.config import PRESETS, STRATEGIES, GroundingConfig, InitConfig, apply_preset

log = logging.getLogger(__name__)


@exits_on_bad_input
def init(
    out: Annotated[
        Path, typer.Option("-o", "--out", help="Checkpoint folder to write (atomically).")
    ],
    sids: Annotated[
        Path, typer.Option("--sids", help="Folder written by `gti sids build`.")
    ] = InitConfig.sids,
    strategy: Annotated[
        str, typer.Option(help=f"New-row initialization: {' | '.join(STRATEGIES)}.")
    ] = InitConfig.strategy,
    start_from: Annotated[
        str, typer.Option(help="Row init that gti grounding starts from (paper: mean).")
    ] = InitConfig.start_from,
    model: Annotated[
        str | None,
        typer.Option(help="smollm2-135m | tiny | a local HF folder (default: the sids' model)."),
    ] = None,
    data: Annotated[
        str | None,
        typer.Option(
            help="movielens-100k | synthetic | jsonl:CATALOG,INTERACTIONS (default: the sids' data)."
        ),
    ] = None,
    preset: Annotated[
        str,
        typer.Option(
            help="Grounding size, steps x batch @ lr: "
            + ", ".join(f"{k}={s}x{b}@{r:g}" for k, (s, b, r) in PRESETS.items())
            + "; auto = paper on CUDA, cpu otherwise."
        ),
    ] = "auto",
    steps: Annotated[
        int | None, typer.Option(help="Grounding steps (overrides the preset).")
    ] = None,
    batch_size: Annotated[
        int | None, typer.Option(help="Grounding batch size (overrides the preset).")
    ] = None,
    lr: Annotated[
        float | None, typer.Option(help="AdamW learning rate (overrides the preset; paper: 1e-3).")
    ] = None,
    save_every: Annotated[
        int, typer.Option(help="Save resume state every N steps.")
    ] = GroundingConfig.save_every,
    seed: Annotated[
        int, typer.Option(help="Seed of the init and the data order.")
    ] = InitConfig.seed,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda[:N].")] = InitConfig.device,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
    allow_download: Annotated[
        bool, typer.Option(help="Let a hub id download from the hub.")
    ] = False,
    cache_dir: Annotated[
        Path | None,
        typer.Option("--cache-dir", help="Cache root (default: $GTI_CACHE or ~/.cache/gti)."),
    ] = None,
) -> None:
    """Add one token per SID code to the backbone and initialize the new rows.

    Writes a checkpoint (HF folder + semantic_ids.json + codebooks.safetensors +
    init_config.json, and train_log.jsonl for gti). An interrupted gti run resumes
    when the same command is run again.
    """
    from gti.init.run import run_init

    if not progress:  # transformers' own bars (loading, writing shards) too
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    if preset == "auto":
        import torch

        preset = "paper" if torch.cuda.is_available() and device != "cpu" else "cpu"
    n_steps, n_batch, n_lr = apply_preset(preset, steps, batch_size, lr)
    cfg = InitConfig(
        sids=sids,
        out=out,
        strategy=strategy,
        start_from=start_from,
        model=model,
        data=data,
        seed=seed,
        grounding=GroundingConfig(
            steps=n_steps,
            batch_size=n_batch,
            lr=n_lr,
            seed=seed,
            save_every=save_every,
            progress=progress,
        ),
        cache_dir=cache_dir,
        allow_download=allow_download,
        device=device,
    )
    if strategy == "gti":
        log.info("grounding: preset %s, %d steps x batch %d, lr %g", preset, n_steps, n_batch, n_lr)
    typer.echo(str(run_init(cfg)))
