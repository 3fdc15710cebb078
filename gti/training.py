"""Training plumbing shared by grounding (``gti init``) and SFT (``gti sft``): the
device, the optimizer, the learning-rate schedule, the result of a run, where a loop
resumes and when it saves, stopping on a signal, the train-log line and the resume
state's fingerprint check. Each stage keeps only its own loop.

A stage that stops early raises :class:`gti.errors.Interrupted` (exit 130 in the CLI);
its resume state is saved and the same call later resumes it.
"""

from __future__ import annotations

import json
import math
import shutil
import signal
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

import torch

from geodiag.errors import InputError


def resolve_device(spec: str) -> torch.device:
    """``auto`` -> CUDA when available, else CPU; ``cuda[:N]`` must be available."""
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if spec.startswith("cuda") and not torch.cuda.is_available():
        raise InputError("--device", f"{spec} requested but CUDA is not available")
    return torch.device(spec)


class OptimizerSettings(Protocol):
    lr: float
    betas: tuple[float, float]
    weight_decay: float


def make_optimizer(
    params: Iterable[torch.nn.Parameter], cfg: OptimizerSettings
) -> torch.optim.Optimizer:
    """AdamW on the trainable ``params``; weight decay on matrices only (not on norms or
    biases). ``cfg`` is the stage's config, so a new optimizer setting is a config field."""
    params = [p for p in params if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=cfg.lr, betas=cfg.betas)


class LoopSettings(Protocol):
    """What a stage's config tells the shared loop pieces: its length, schedule and saves."""

    steps: int
    lr: float
    warmup_steps: int
    save_every: int


def set_lr(optimizer, step: int, cfg: LoopSettings, **decay: Any) -> float:
    """Every parameter group of ``optimizer`` at the learning rate of step ``step``:
    :func:`get_lr` with ``cfg``'s peak, warm-up and length, ``decay`` its decay keywords
    (``decay=`` or ``min_lr_ratio=``, per stage). Returns the rate, for the step's log."""
    lr = get_lr(step, lr=cfg.lr, warmup_steps=cfg.warmup_steps, total_steps=cfg.steps, **decay)
    for group in optimizer.param_groups:
        group["lr"] = lr
    return lr


def get_lr(
    step: int,
    *,
    lr: float,
    warmup_steps: int,
    total_steps: int,
    decay: str = "cosine",
    min_lr_ratio: float = 0.0,
) -> float:
    """Learning rate of optimizer step ``step`` (0-based), for grounding and SFT alike:
    linear warm-up over ``warmup_steps`` (step k gets (k + 1) / warmup of ``lr``), then
    constant (``decay="none"``) or a cosine from ``lr`` to ``lr * min_lr_ratio`` at the
    last step (``total_steps - 1``)."""
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    if decay == "none":
        return lr
    span = max(1, total_steps - 1 - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / span)
    min_lr = lr * min_lr_ratio
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - min_lr)


@dataclass
class TrainResult:
    step: int  # optimizer steps done in total (including those before a resume)
    completed: bool
    log: list[dict[str, object]] = field(default_factory=list)


def resume_point(
    restored: tuple[int, list[dict[str, object]]] | None, steps: int
) -> tuple[int, list[dict[str, object]]]:
    """(step, log) a loop starts from: 0 and an empty log, or what a resume state held.
    A state past ``steps`` is refused: it was saved by a longer run."""
    if restored is None:
        return 0, []
    step, log = restored
    if step > steps:
        raise ValueError(f"resume state is at step {step}, past --steps {steps}")
    return step, log


def save_due(step: int, cfg: LoopSettings, halt: bool) -> bool:
    """Whether the resume state is saved after step ``step`` (1-based count of steps
    done): every ``save_every`` steps and when stopping early, never after the last step
    (the stage writes its result instead)."""
    return step < cfg.steps and (halt or step % cfg.save_every == 0)


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

    def stop_at(self, step: int, should_stop: Callable[[int], bool] | None) -> bool:
        """Whether to stop after step ``step``: a signal came, or ``should_stop(step)``
        says so (tests use it to simulate a kill)."""
        return self.requested or (should_stop is not None and should_stop(step))


def loss_key(task: str) -> str:
    """Train-log key of a task's mean loss: ``text->sid`` -> ``loss_text_to_sid``."""
    return "loss_" + task.replace("->", "_to_").replace("-", "_")


def log_entry(
    step: int,
    tasks: Sequence[str],
    sums: Sequence[float],
    counts: Sequence[float],
    seconds: float,
    *,
    every_task: bool = False,
    **extra: object,
) -> dict[str, object]:
    """One line of train_log.jsonl: the mean loss over all answer tokens, the mean per
    task (a task without tokens: None with ``every_task``, else left out), ``extra``
    (e.g. lr, grad_norm), the number of answer tokens and the step's seconds."""
    total = float(sum(counts))
    entry: dict[str, object] = {"step": step, "loss": float(sum(sums)) / max(total, 1.0)}
    for name, s, n in zip(tasks, sums, counts, strict=True):
        if n > 0 or every_task:
            entry[loss_key(name)] = float(s) / float(n) if n > 0 else None
    entry.update(extra)
    entry["answer_tokens"] = int(total)
    entry["seconds"] = round(seconds, 4)
    if not math.isfinite(entry["loss"]):  # type: ignore[arg-type]
        raise FloatingPointError(f"loss is {entry['loss']} at step {step}")
    return entry


class ResumeStore:
    """Where a stage keeps its resume state (``<out>.partial/``), and the fingerprint of
    the settings a resumed run must share with the run that saved it. Stages add how
    they save and load their state."""

    def __init__(self, folder: Path, fingerprint: dict[str, object]) -> None:
        self.folder = folder
        # As it reads back from JSON (tuples become lists), so the two compare equal.
        self.fingerprint = json.loads(json.dumps(fingerprint, allow_nan=False))

    def check(self, saved: object, where: Path) -> None:
        """Refuse a state saved with other settings, naming them."""
        saved = saved if isinstance(saved, dict) else {}
        if saved == self.fingerprint:
            return
        changed = sorted(
            k for k in set(saved) | set(self.fingerprint) if saved.get(k) != self.fingerprint.get(k)
        )
        raise InputError(
            where,
            f"a run with other settings ({', '.join(changed)}) left this state; rerun with "
            f"the same flags to resume it, or delete {self.folder} to start over",
        )

    def clear(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
