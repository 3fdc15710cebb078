"""The grounding loop: fast steps on the new rows, progress, periodic resume state.

Readable top to bottom: restore (if a previous run left state), then per step:
batch by step index -> the objective's losses (fast cross-entropy, token distillation
or both: ``GroundingConfig.objective``) -> optimizer step on the new rows (all of them,
or with ``lazy-adam`` only those present in the batch) -> log -> maybe measure the
structure curve -> maybe save.
SIGINT/SIGTERM finish the current step, save, and stop: no step is lost. A hard
kill loses at most ``save_every`` steps.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TypeVar

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel

from gti.init.checkpoint import GroundingState
from gti.init.config import GroundingConfig
from gti.init.distill import DistillBatch, DistillLoss, DistillStream, check_layer, distill_loss
from gti.init.grounding import NewRows, SharedPrefix, StepLoss, fast_loss, layer_checkpointing
from gti.init.optim import LazyAdam, make_row_optimizer, present_rows
from gti.init.pairs import Batch, PairStream
from gti.init.parallel import Group, sharded
from gti.init.sharding import whole_root
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

B = TypeVar("B", Batch, DistillBatch)


def direction_sums(out: StepLoss) -> torch.Tensor:
    """(2 * n_directions,) float64: each direction's summed token loss, then its count."""
    d = range(len(DIRECTIONS))
    sums = [out.token_losses[out.token_direction == k].double().sum() for k in d]
    counts = [(out.token_direction == k).sum().double() for k in d]
    return torch.stack([*sums, *counts]).cpu()


def step_stats(ce: StepLoss | None, dist: DistillLoss | None) -> torch.Tensor:
    """(2 * n_directions + 2,) float64: :func:`direction_sums` (zeros without
    cross-entropy), then the summed distillation loss and its number of positions."""
    n = len(DIRECTIONS)
    stats = torch.zeros(2 * n + 2, dtype=torch.float64)
    if ce is not None:
        stats[: 2 * n] = direction_sums(ce)
    if dist is not None:
        stats[2 * n] = dist.position_losses.double().sum().cpu()
        stats[2 * n + 1] = len(dist.position_losses)
    return stats


def step_objective(
    ce: StepLoss | None, dist: DistillLoss | None, stats: torch.Tensor, weight: float
) -> torch.Tensor:
    """The loss to back-propagate: cross-entropy + ``weight`` x distillation, each this
    process's share of the step's mean (``stats``: summed over processes; one process:
    the means themselves, the shares being 1 exactly)."""
    n = len(DIRECTIONS)
    terms = []
    if ce is not None:
        terms.append(ce.loss * (len(ce.token_losses) / float(stats[n : 2 * n].sum())))
    if dist is not None:
        terms.append(weight * dist.loss * (len(dist.position_losses) / float(stats[2 * n + 1])))
    return terms[0] if len(terms) == 1 else terms[0] + terms[1]


def step_log(
    step: int,
    out: StepLoss | torch.Tensor,
    seconds: float,
    *,
    distill_weight: float = 1.0,
    **extra: object,
) -> dict[str, object]:
    """The train-log line of a grounding step: loss overall and per direction (from the
    step's loss, or from :func:`step_stats` summed over processes). With distillation,
    ``loss`` is the objective (``ce`` + weight x ``distill``), ``ce`` the cross-entropy
    alone (None without it), ``distill`` the mean over ``distill_positions``."""
    stats = direction_sums(out) if isinstance(out, StepLoss) else out
    n = len(DIRECTIONS)
    sums = list(stats[:n])
    counts = [int(c) for c in stats[n : 2 * n]]
    has_ce = sum(counts) > 0
    entry = log_entry(step, DIRECTIONS, sums, counts, seconds, every_task=has_ce, **extra)
    if len(stats) > 2 * n and stats[2 * n + 1] > 0:
        distill = float(stats[2 * n]) / float(stats[2 * n + 1])
        ce = entry["loss"] if has_ce else None
        entry["ce"] = ce
        entry["distill"] = distill
        entry["distill_positions"] = int(stats[2 * n + 1])
        entry["loss"] = (ce or 0.0) + distill_weight * distill  # type: ignore[operator]
        if not math.isfinite(entry["loss"]):  # type: ignore[arg-type]
            raise FloatingPointError(f"distillation loss is {distill} at step {step}")
    return entry


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
    distill: DistillStream | None = None,
    resume: GroundingState | None = None,
    should_stop: Callable[[int], bool] | None = None,
    probe: StructureProbe | None = None,
    group: Group = Group(),
) -> TrainResult:
    """Run (or finish) ``cfg.steps`` grounding steps on ``rows``; the model is frozen.

    ``distill``: the items in context that ``cfg.objective`` distill / ce+distill needs
    (:mod:`gti.init.distill`). ``should_stop(step)`` is checked after every step (tests
    use it to simulate a kill); stopping saves the resume state first. With ``probe``
    and ``cfg.structure_every``, the structure curve goes into the log (step 0, every
    ``structure_every`` steps, and the last step). ``group``: the processes sharing
    each step's batch (:mod:`gti.init.parallel`).
    """
    if cfg.uses_distill:
        if distill is None:
            raise ValueError(f"objective {cfg.objective!r} needs a DistillStream")
        check_layer(model, cfg.distill_layer)
    optimizer = make_optimizer(rows, cfg)
    step, log = resume_point(
        resume.load(rows, optimizer) if resume is not None else None, cfg.steps
    )
    with whole_root(model):  # under --fsdp: the embedding (gti.init.sharding)
        shared = shared_prefix(model, stream) if cfg.uses_ce else None
        d_shared = shared_prefix(model, distill) if cfg.uses_distill else None
    # Rank 0 logs the curve; under --fsdp the probe's forwards are collectives: all run it.
    measure = probe is not None and cfg.structure_every > 0 and (group.main or sharded(model))
    elapsed = training_seconds(log)
    if measure and step == 0:
        log.append(measure_structure(model, 0, 0.0, probe))  # type: ignore[arg-type]
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
            lr = set_lr(optimizer, step, cfg, decay=cfg.decay)
            batch = stream.batch(step) if cfg.uses_ce else None
            d_batch = distill.batch(step) if cfg.uses_distill else None  # type: ignore[union-attr]
            ce = dist = None
            with whole_root(model):  # under --fsdp: embedding and head, forward and backward
                with (
                    torch.autocast(device_type, dtype=torch.bfloat16, enabled=cfg.bf16),
                    layer_checkpointing(model, cfg.gradient_checkpointing),
                ):
                    if batch is not None:
                        ce = fast_loss(model, rows, share_of(batch, group), shared=shared)
                    if d_batch is not None:
                        dist = distill_loss(
                            model,
                            rows,
                            share_of(d_batch, group),
                            target=cfg.distill_target,
                            layer=cfg.distill_layer,
                            shared=d_shared,
                        )
                optimizer.zero_grad(set_to_none=True)
                stats = group.sum_(step_stats(ce, dist))
                step_objective(ce, dist, stats, cfg.distill_weight).backward()
            if group.world > 1:  # each process's share of the step's mean: gradients summed
                for p in rows.parameters():
                    if p.grad is not None:
                        group.sum_(p.grad)
            if isinstance(optimizer, LazyAdam):
                optimizer.step(present_in(batch, d_batch, rows))
            else:
                optimizer.step()
            step += 1
            seconds = time.perf_counter() - t0
            elapsed += seconds
            entry = step_log(step, stats, seconds, distill_weight=cfg.distill_weight, lr=lr)
            log.append(entry)
            if measure and (step % cfg.structure_every == 0 or step == cfg.steps):
                log.append(measure_structure(model, step, elapsed, probe))  # type: ignore[arg-type]
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


def measure_structure(
    model: PreTrainedModel, step: int, elapsed: float, probe: StructureProbe
) -> dict[str, object]:
    """One structure-curve line (gti.init.structure), the root's weights whole under --fsdp."""
    with whole_root(model):
        return structure_entry(step, elapsed, probe)


def shared_prefix(
    model: PreTrainedModel, stream: PairStream | DistillStream
) -> SharedPrefix | None:
    """The key/value cache of the tokens every example of ``stream`` starts with, if any."""
    prefix = stream.common_prefix()
    return SharedPrefix(model, prefix) if prefix else None


def share_of(batch: B, group: Group) -> B:
    """This process's contiguous share of a step's batch (the whole batch on one)."""
    if group.world == 1:
        return batch
    n = len(batch.n_suffix if isinstance(batch, DistillBatch) else batch.lengths)
    return batch.select(torch.arange(n)[group.share(n)])  # type: ignore[return-value]


def present_in(batch: Batch | None, d_batch: DistillBatch | None, rows: NewRows) -> torch.Tensor:
    """Rows of ``E_new`` that the step's batches hold (``lazy-adam`` moves only these)."""
    ids = [b.input_ids.reshape(-1) for b in (batch, d_batch and d_batch.student) if b is not None]
    return present_rows(torch.cat(ids).to(rows.slot.device), rows.slot)
