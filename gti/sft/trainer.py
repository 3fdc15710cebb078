"""The SFT loop: AdamW, warmup + cosine, gradient accumulation, DDP via accelerate.

Readable top to bottom: restore (if a previous run left state), then per step:
this process's share of the global batch -> its micro-batches (gradient sync on
the last only) -> clip -> AdamW -> log -> maybe save. The loss of every
micro-batch is divided by the number of answer tokens of the whole global batch,
so 1 process x N accumulation steps and N processes x 1 compute the same update.
SIGINT/SIGTERM finish the current step, save and stop (no step is lost); a hard
kill loses at most ``save_every`` steps, which a resumed run redoes identically.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext

import torch
from accelerate import Accelerator
from tqdm.auto import tqdm
from transformers import PreTrainedModel

from gti.sft.checkpoint import SFTState
from gti.sft.config import SFTConfig
from gti.sft.data import TASK_NAMES, SFTStream
from gti.sft.loss import AnswerLoss
from gti.sft.sequence import SequenceStream
from gti.training import (
    StopOnSignal,
    TrainResult,
    log_entry,
    make_optimizer,
    resume_point,
    save_due,
    set_lr,
)


def micro_batches(
    step: int, cfg: SFTConfig, rank: int, world: int, length: Callable[[int], int] | None = None
) -> list[range] | list[list[int]]:
    """Example indices of this process's micro-batches for optimizer step ``step``.

    With ``length`` (tokens of example ``i``), the process's share of the step is sorted
    by length before it is cut into micro-batches, so windows of like length are padded
    together. The step's gradient is unchanged: the same examples, each token's loss
    divided by the step's token count, whatever the grouping.
    """
    per_rank = cfg.batch_size // world
    start = step * cfg.batch_size + rank * per_rank
    mb = cfg.micro_batch_size
    if length is None:
        return [range(start + i, start + i + mb) for i in range(0, per_rank, mb)]
    share = sorted(range(start, start + per_rank), key=lambda i: (length(i), i))
    return [share[i : i + mb] for i in range(0, per_rank, mb)]


def train_sft(
    model: PreTrainedModel,
    stream: SFTStream | SequenceStream,  # --objective example | sequence
    cfg: SFTConfig,
    accelerator: Accelerator,
    *,
    resume: SFTState | None = None,
    should_stop: Callable[[int], bool] | None = None,
    cpu_bf16: bool = False,
) -> tuple[TrainResult, AnswerLoss]:
    """Run (or finish) ``cfg.steps`` optimizer steps. Returns the result and the
    prepared loss module (whose ``.model``, unwrapped, is the trained model).
    ``cpu_bf16``: forward passes under CPU bf16 autocast (CUDA's is accelerate's)."""
    model.train()
    loss_fn, optimizer = accelerator.prepare(
        AnswerLoss(model), make_optimizer(model.parameters(), cfg)
    )
    step, log = resume_point(resume.load(accelerator) if resume is not None else None, cfg.steps)
    rank, world, device = accelerator.process_index, accelerator.num_processes, accelerator.device
    bar = tqdm(
        total=cfg.steps,
        initial=step,
        desc="sft",
        unit="step",
        disable=not (cfg.progress and accelerator.is_local_main_process),
    )
    with StopOnSignal() as signals, bar:
        while step < cfg.steps:
            t0 = time.perf_counter()
            lr = set_lr(optimizer, step, cfg, min_lr_ratio=cfg.min_lr_ratio)
            groups = micro_batches(step, cfg, rank, world, getattr(stream, "length", None))
            batches = [stream.batch(r) for r in groups]
            local = torch.tensor([float(sum(b.n_answer_tokens for b in batches))], device=device)
            n_tokens = float(accelerator.reduce(local, reduction="sum").item())
            # (loss sum, tokens) per task, then the stop flag: one all-reduce for the log.
            stats = torch.zeros(2 * len(TASK_NAMES) + 1, dtype=torch.float64, device=device)
            for i, b in enumerate(batches):
                last = i == len(batches) - 1
                with nullcontext() if last else accelerator.no_sync(loss_fn):
                    mask = b.answer_mask.to(device)
                    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cpu_bf16):
                        loss_sum, token_losses = loss_fn(
                            b.input_ids.to(device), b.attention_mask.to(device), mask
                        )
                    # DDP averages gradients over processes: scale back up by world.
                    accelerator.backward(loss_sum * (world / n_tokens))
                token_task = b.task.to(device)[mask[:, 1:].nonzero()[:, 0]]  # (N,)
                for t in range(len(TASK_NAMES)):
                    stats[2 * t] += token_losses[token_task == t].double().sum()
                    stats[2 * t + 1] += (token_task == t).sum()
            grad_norm = accelerator.clip_grad_norm_(loss_fn.parameters(), cfg.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1

            halt = signals.stop_at(step, should_stop)
            stats[-1] = float(halt)
            stats = accelerator.reduce(stats, reduction="sum") if world > 1 else stats
            halt = bool(stats[-1] > 0)
            log.append(step_log(step, stats, lr, grad_norm, time.perf_counter() - t0))
            bar.update(1)
            bar.set_postfix(loss=f"{log[-1]['loss']:.3f}")
            last_kept = cfg.keep_state and step == cfg.steps
            if resume is not None and (save_due(step, cfg, halt) or last_kept):
                resume.save(accelerator, step, log)
            if halt and step < cfg.steps:
                return TrainResult(step, False, log), loss_fn
    return TrainResult(step, True, log), loss_fn


def step_log(
    step: int, stats: torch.Tensor, lr: float, grad_norm: object, seconds: float
) -> dict[str, object]:
    """The train-log line of an SFT step: loss overall and per task, lr, gradient norm."""
    sums, counts = stats[0:-1:2].tolist(), stats[1:-1:2].tolist()
    norm = float(grad_norm) if grad_norm is not None else None  # type: ignore[arg-type]
    return log_entry(step, TASK_NAMES, sums, counts, seconds, lr=lr, grad_norm=norm)
