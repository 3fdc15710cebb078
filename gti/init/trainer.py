"""The grounding loop: fast steps on the new rows, progress, periodic resume state.

Readable top to bottom: restore (if a previous run left state), then per step:
batch by step index -> fast loss -> optimizer step on the new rows (all of them, or
with ``lazy-adam`` only those present in the batch) -> log -> maybe measure the
structure curve -> maybe save.
SIGINT/SIGTERM finish the current step, save, and stop: no step is lost. A hard
kill loses at most ``save_every`` steps.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel

from gti.init.checkpoint import GroundingState
from gti.init.config import GroundingConfig
from gti.init.grounding import NewRows, SharedPrefix, StepLoss, fast_loss
from gti.init.optim import LazyAdam, make_row_optimizer, present_rows
from gti.init.pairs import PairStream
from gti.init.parallel import Group
from gti.init.structure import StructureProbe, structure_entry
from gti.prompts import DIRECTIONS
from gti.training import (
    StopOnSignal,
    TrainResult,
    log_entry,
    resume_point,
    save_due,
    set_lr,
)


def direction_sums(out: StepLoss) -> torch.Tensor:
    """(2 * n_directions,) float64: each direction's summed token loss, then its count."""
    d = range(len(DIRECTIONS))
    sums = [out.token_losses[out.token_direction == k].double().sum() for k in d]
    counts = [(out.token_direction == k).sum().double() for k in d]
    return torch.stack([*sums, *counts]).cpu()


def step_log(
    step: int, out: StepLoss | torch.Tensor, seconds: float, **extra: object
) -> dict[str, object]:
    """The train-log line of a grounding step: loss overall and per direction (from the
    step's loss, or from :func:`direction_sums` summed over processes)."""
    stats = direction_sums(out) if isinstance(out, StepLoss) else out
    n = len(DIRECTIONS)
    sums = list(stats[:n])
    counts = [int(c) for c in stats[n:]]
    return log_entry(step, DIRECTIONS, sums, counts, seconds, every_task=True, **extra)


def make_optimizer(rows: NewRows, cfg: GroundingConfig) -> torch.optim.Optimizer:
    return make_row_optimizer(
        list(rows.parameters()),
        cfg.optimizer,
        lr=cfg.lr,
        betas=cfg.betas,
        eps=cfg.eps,
        weight_decay=cfg.weight_decay,
    )


def training_seconds(log: list[dict[str, object]]) -> float:
    """Seconds spent in steps so far (structure measurements excluded)."""
    return sum(float(e["seconds"]) for e in log if "loss" in e)  # type: ignore[arg-type]


def train_grounding(
    model: PreTrainedModel,
    rows: NewRows,
    stream: PairStream,
    cfg: GroundingConfig,
    *,
    resume: GroundingState | None = None,
    should_stop: Callable[[int], bool] | None = None,
    probe: StructureProbe | None = None,
    group: Group = Group(),
) -> TrainResult:
    """Run (or finish) ``cfg.steps`` grounding steps on ``rows``; the model is frozen.

    ``should_stop(step)`` is checked after every step (tests use it to simulate a
    kill); stopping saves the resume state first. With ``probe`` and
    ``cfg.structure_every``, the structure curve goes into the log (step 0, every
    ``structure_every`` steps, and the last step). ``group``: the processes sharing
    each step's batch (:mod:`gti.init.parallel`).
    """
    optimizer = make_optimizer(rows, cfg)
    step, log = resume_point(
        resume.load(rows, optimizer) if resume is not None else None, cfg.steps
    )
    prefix = stream.common_prefix()
    shared = SharedPrefix(model, prefix) if prefix else None
    measure = probe is not None and cfg.structure_every > 0 and group.main
    elapsed = training_seconds(log)
    if measure and step == 0:
        log.append(structure_entry(0, 0.0, probe))  # type: ignore[arg-type]
    device_type = rows.ids.device.type
    bar = tqdm(
        total=cfg.steps,
        initial=step,
        desc="grounding",
        unit="step",
        disable=not (cfg.progress and group.main),
    )
    with StopOnSignal() as signals, bar:
        while step < cfg.steps:
            t0 = time.perf_counter()
            batch = stream.batch(step)
            lr = set_lr(optimizer, step, cfg, decay=cfg.decay)
            share = batch
            if group.world > 1:
                share = batch.select(
                    torch.arange(len(batch.lengths))[group.share(len(batch.lengths))]
                )
            with torch.autocast(device_type, dtype=torch.bfloat16, enabled=cfg.bf16):
                out = fast_loss(model, rows, share, shared=shared)
            optimizer.zero_grad(set_to_none=True)
            stats = direction_sums(out)
            if group.world == 1:
                out.loss.backward()
            else:  # this share's summed loss over the step's tokens; gradients summed
                group.sum_(stats)
                n_local, n_all = len(out.token_losses), float(stats[len(DIRECTIONS) :].sum())
                (out.loss * (n_local / n_all)).backward()
                for p in rows.parameters():
                    if p.grad is not None:
                        group.sum_(p.grad)
            if isinstance(optimizer, LazyAdam):
                optimizer.step(present_rows(batch.input_ids.to(rows.slot.device), rows.slot))
            else:
                optimizer.step()
            step += 1
            seconds = time.perf_counter() - t0
            elapsed += seconds
            entry = step_log(step, stats, seconds, lr=lr)
            log.append(entry)
            if measure and (step % cfg.structure_every == 0 or step == cfg.steps):
                log.append(structure_entry(step, elapsed, probe))  # type: ignore[arg-type]
            bar.update(1)
            bar.set_postfix(loss=f"{entry['loss']:.3f}")
            halt = group.any(signals.stop_at(step, should_stop), rows.ids.device)
            if resume is not None and save_due(step, cfg, halt):
                if group.main:
                    resume.save(step, rows, optimizer, log)
                group.barrier()
            if halt and step < cfg.steps:
                return TrainResult(step, False, log)
    return TrainResult(step, True, log)
