"""The grounding loop: fast steps on the new rows, progress, periodic resume state.

Readable top to bottom: restore (if a previous run left state), then per step:
batch by step index -> fast loss -> AdamW on the new rows -> log -> maybe save.
SIGINT/SIGTERM finish the current step, save, and stop: no step is lost. A hard
kill loses at most ``save_every`` steps.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tqdm.auto import tqdm
from transformers import PreTrainedModel

from gti.init.checkpoint import GroundingState
from gti.init.config import GroundingConfig
from gti.init.grounding import NewRows, SharedPrefix, StepLoss, fast_loss
from gti.init.pairs import PairStream
from gti.prompts import DIRECTIONS
from gti.training import StopOnSignal, TrainResult, log_entry, make_optimizer


def step_log(step: int, out: StepLoss, seconds: float) -> dict[str, object]:
    """The train-log line of a grounding step: loss overall and per direction."""
    sums = [
        out.token_losses[out.token_direction == d].double().sum() for d in range(len(DIRECTIONS))
    ]
    counts = [int((out.token_direction == d).sum()) for d in range(len(DIRECTIONS))]
    return log_entry(step, DIRECTIONS, sums, counts, seconds, every_task=True)


def train_grounding(
    model: PreTrainedModel,
    rows: NewRows,
    stream: PairStream,
    cfg: GroundingConfig,
    *,
    resume: GroundingState | None = None,
    should_stop: Callable[[int], bool] | None = None,
) -> TrainResult:
    """Run (or finish) ``cfg.steps`` grounding steps on ``rows``; the model is frozen.

    ``should_stop(step)`` is checked after every step (tests use it to simulate a
    kill); stopping saves the resume state first.
    """
    optimizer = make_optimizer(rows.parameters(), cfg)
    step, log = 0, []
    restored = resume.load(rows, optimizer) if resume is not None else None
    if restored is not None:
        step, log = restored
        if step > cfg.steps:
            raise ValueError(f"resume state is at step {step}, past --steps {cfg.steps}")
    prefix = stream.common_prefix()
    shared = SharedPrefix(model, prefix) if prefix else None
    bar = tqdm(
        total=cfg.steps, initial=step, desc="grounding", unit="step", disable=not cfg.progress
    )
    with StopOnSignal() as signals, bar:
        while step < cfg.steps:
            t0 = time.perf_counter()
            out = fast_loss(model, rows, stream.batch(step), shared=shared)
            optimizer.zero_grad(set_to_none=True)
            out.loss.backward()
            optimizer.step()
            step += 1
            log.append(step_log(step, out, time.perf_counter() - t0))
            bar.update(1)
            bar.set_postfix(loss=f"{log[-1]['loss']:.3f}")
            halt = signals.requested or (should_stop is not None and should_stop(step))
            if resume is not None and step < cfg.steps and (halt or step % cfg.save_every == 0):
                resume.save(step, rows, optimizer, log)
            if halt and step < cfg.steps:
                return TrainResult(step, False, log)
    return TrainResult(step, True, log)
