"""``gti sft``: a thin typer command; register it with ``app.command("sft")(sft)``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from gti.errors import exits_on_bad_input
from gti.sft.config import FREEZABLE, TASKS, SFTConfig

D = SFTConfig  # defaults


@exits_on_bad_input
def sft(
    init: Annotated[
        Path, typer.Option("--init", help="Checkpoint written by `gti init`.")
    ] = D.init,
    out: Annotated[
        Path, typer.Option("-o", "--out", help="Checkpoint folder to write (atomically).")
    ] = D.out,
    data: Annotated[
        str | None,
        typer.Option(
            help="movielens-100k | synthetic | jsonl:CATALOG,INTERACTIONS (default: the SIDs' data)."
        ),
    ] = None,
    tasks: Annotated[
        str, typer.Option(help=f"{' | '.join(TASKS)} (lcrec adds text<->SID alignment tasks).")
    ] = D.tasks,
    align_ratio: Annotated[
        float, typer.Option(help="Share of alignment examples in the lcrec mix.")
    ] = D.align_ratio,
    steps: Annotated[int, typer.Option(help="Optimizer steps (paper: 8000).")] = D.steps,
    batch_size: Annotated[
        int, typer.Option(help="Global batch: examples per optimizer step (paper: 128).")
    ] = D.batch_size,
    micro_batch_size: Annotated[
        int, typer.Option(help="Examples per forward and process; the rest is accumulation.")
    ] = D.micro_batch_size,
    lr: Annotated[float, typer.Option(help="Peak AdamW learning rate.")] = D.lr,
    warmup_steps: Annotated[int, typer.Option(help="Linear warmup steps.")] = D.warmup_steps,
    min_lr_ratio: Annotated[
        float, typer.Option(help="Cosine decays to lr x this.")
    ] = D.min_lr_ratio,
    weight_decay: Annotated[float, typer.Option(help="AdamW weight decay.")] = D.weight_decay,
    max_grad_norm: Annotated[float, typer.Option(help="Gradient clipping.")] = D.max_grad_norm,
    k_core: Annotated[
        int, typer.Option(help="Keep users/items with >= this many events.")
    ] = D.k_core,
    max_history: Annotated[int, typer.Option(help="Items of history in a prompt.")] = D.max_history,
    titles: Annotated[bool, typer.Option(help="Write titles beside history SIDs.")] = D.titles,
    freeze: Annotated[
        list[str] | None, typer.Option(help=f"Freeze a part: {' | '.join(FREEZABLE)} (repeatable).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the data order.")] = D.seed,
    save_every: Annotated[
        int, typer.Option(help="Save resume state every N steps.")
    ] = D.save_every,
    bf16: Annotated[bool, typer.Option(help="bf16 autocast on CUDA (ignored on CPU).")] = D.bf16,
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
    """Fine-tune an initialized checkpoint for next-item generation (all parameters).

    Writes a checkpoint with stage "sft" (HF folder + semantic_ids.json +
    codebooks.safetensors + sft_config.json + train_log.jsonl). An interrupted run
    resumes when the same command is run again. Multi-GPU: `accelerate launch -m
    gti.cli sft ...` or `torchrun --nproc_per_node N -m gti.cli sft ...`.
    """
    from gti.sft.run import run_sft

    cfg = SFTConfig(
        init=init,
        out=out,
        data=data,
        tasks=tasks,
        align_ratio=align_ratio,
        steps=steps,
        batch_size=batch_size,
        micro_batch_size=micro_batch_size,
        lr=lr,
        warmup_steps=warmup_steps,
        min_lr_ratio=min_lr_ratio,
        weight_decay=weight_decay,
        max_grad_norm=max_grad_norm,
        k_core=k_core,
        max_history=max_history,
        titles=titles,
        freeze=tuple(freeze or ()),
        seed=seed,
        save_every=save_every,
        bf16=bf16,
        device=device,
        dtype=dtype,
        cache_dir=cache_dir,
        progress=progress,
    )
    path = run_sft(cfg)
    if os.environ.get("RANK", "0") == "0":  # under torchrun/accelerate: print once
        typer.echo(str(path))
