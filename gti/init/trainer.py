"""The grounding loop: fast steps on the new rows, progress, periodic resume state.

Readable top to bottom: restore (if a previous run left state), then per step:
batch by step index -> fast loss -> AdamW on the new rows -> log -> maybe save.
SIGINT/SIGTERM finish the current step, save, and stop: no step is lost. A hard
kill loses at most ``save_every`` steps.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel

from gti.errors import Interrupted
from gti.init.checkpoint import ResumeStore
from gti.init.config import GroundingConfig
from gti.init.grounding import NewRows, SharedPrefix, StepLoss, fast_loss
from gti.init.pairs import PairStream
from gti.prompts import DIRECTIONS


@dataclass
class GroundingResult:
    step: int  # steps done in total (including those before a resume)
    completed: bool
    log: list[dict[str, object]] = field(default_factory=list)


class GroundingInterrupted(Interrupted):
    """Stopped before the last step; the state to resume from is saved."""


def make_optimizer(rows: NewRows, cfg: GroundingConfig) -> torch.optim.AdamW:
    return torch.optim.AdamW(
        rows.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay
    )


def log_entry(step: int, out: StepLoss, seconds: float) -> dict[str, object]:
    entry: dict[str, object] = {"step": step, "loss": float(out.loss.detach())}
    for d, name in enumerate(DIRECTIONS):
        losses = out.token_losses[out.token_direction == d]
        key = "loss_" + name.replace("->", "_to_")
        entry[key] = float(losses.mean()) if losses.numel() else None
    entry["answer_tokens"] = int(out.token_losses.numel())
    entry["seconds"] = round(seconds, 4)
    if not math.isfinite(entry["loss"]):  # type: ignore[arg-type]
        raise FloatingPointError(f"grounding loss is {entry['loss']} at step {step}")
    return entry


class StopOnSignal:
    """While active, SIGINT/SIGTERM set ``requested`` instead of killing the step.

    A second SIGINT raises KeyboardInterrupt at once, for a user in a hurry.
    """

    def __init__(self) -> None:
        self.requested = False
        self._saved: dict[int, object] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = True

    def __enter__(self) -> StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._saved[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]


def train_grounding(
    model: PreTrainedModel,
    rows: NewRows,
    stream: PairStream,
    cfg: GroundingConfig,
    *,
    resume: ResumeStore | None = None,
    should_stop: Callable[[int], bool] | None = None,
) -> GroundingResult:
    """Run (or finish) ``cfg.steps`` grounding steps on ``rows``; the model is frozen.

    ``should_stop(step)`` is checked after every step (tests use it to simulate a
    kill); stopping saves the resume state first.
    """
    optimizer = make_optimizer(rows, cfg)
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
            log.append(log_entry(step, out, time.perf_counter() - t0))
            bar.update(1)
            bar.set_postfix(loss=f"{log[-1]['loss']:.3f}")
            halt = signals.requested or (should_stop is not None and should_stop(step))
            if resume is not None and step < cfg.steps and (halt or step % cfg.save_every == 0):
                resume.save(step, rows, optimizer, log)
            if halt and step < cfg.steps:
                return GroundingResult(step, False, log)
    return GroundingResult(step, True, log)
