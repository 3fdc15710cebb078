"""SFT throughput: the sequence route against the per-example route, and MFU.

``--routes INIT`` (the issue-49 comparison): both of ``gti sft``'s objectives on the same
MovieLens-100k data, model and machine, each through ``gti.sft.run.run_sft`` itself
(``--steps`` optimizer steps each, one warm-up step dropped; the per-step times come
from the train log, so checkpoint writing is left out):

  example   one prompt per next item, as the earlier study trained: the [sft] section
            of configs/study.toml (batch 8 of micro-batch 1, history 10, empty system turn)
  sequence  packed history windows: the [sft] section of configs/study-seq.toml (batch 8
            windows of micro-batch 2 grouped by length)

Both routes run with the same ``--bf16`` (default off: float32, as the study trains; on:
bf16 autocast where the CPU has avx512_bf16 or AMX). It prints real tokens/s, examples
per epoch and wall time per epoch of each, their ratio (goal: the sequence epoch in at
most 1/10 of the example epoch), and MFU against a square matmul's peak measured in the
same run, in the dtype the steps computed in (bf16 when autocast was on). The LM head is
counted only at the answer positions, the only ones ``gti.sft.loss.AnswerLoss``
projects. INIT is a `gti init` checkpoint of MovieLens-100k (e.g.
runs/ml100k-seq/init/mean-seed0 after `gti study run configs/study-seq.toml`).

    .venv/bin/python bench/sft.py --routes runs/ml100k-seq/init/mean-seed0 [--steps 4]

Without ``--routes``: one full fine-tuning step on random tokens, fp32 and bf16 autocast:

One SFT step as `gti sft` takes it: every parameter trains (forward, backward with
weight gradients, AdamW), on sequences of the length the cpu preset's prompts have
(~100 tokens: 10 history items as SIDs in the chat template). The token ids are
random: compute does not depend on which tokens they are. FLOPs as in bench/mfu.py:
forward 2 x matmul params x tokens + attention + LM head over every position,
backward 2x forward (activation and weight gradients); the peak is a square
torch.matmul in the same dtype, measured in the same run.

    .venv/bin/python bench/sft.py [--batch-size 4] [--length 100] [--steps 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
import time
from pathlib import Path

import torch
from mfu import Shape, bf16_supported, matmul_peak

from gti.models.backbone import resolve_backbone

ROOT = Path(__file__).resolve().parents[1]
# Each route's SFT settings are those of the study that trains that way (its [sft] section).
ROUTES = {
    "example": ROOT / "configs" / "study.toml",  # the earlier study
    "sequence": ROOT / "configs" / "study-seq.toml",  # issue 49's study
}


def sft_seconds(model, batch: torch.Tensor, steps: int, bf16: bool) -> float:
    """Seconds per full fine-tuning step over ``batch`` (B, T), after one warm-up."""
    model.train()
    for p in model.parameters():
        p.requires_grad_(True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    t0 = 0.0
    for i in range(steps + 1):
        if i == 1:
            t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return (time.perf_counter() - t0) / steps


def route_config(init: Path, out: Path, route: str, steps: int, bf16: str):
    """The SFT config of ``route``: its study's [sft] section, ``steps`` steps from
    ``init`` into ``out`` without warmup or checkpoints, autocast ``bf16``."""
    from gti.study.config import load_study_config

    return dataclasses.replace(
        load_study_config(ROUTES[route]).sft, init=init, out=out, steps=steps,
        warmup_steps=0, save_every=10**6, progress=False, bf16=bf16,
    )  # fmt: skip


def route_figures(init: Path, route: str, steps: int, shape: Shape, bf16: str) -> dict[str, float]:
    """Run ``steps`` + 1 SFT steps of ``route`` from ``init``; figures of the last ``steps``."""
    from gti.data.tasks import dataset_of, load_task_data
    from gti.sft.run import load_checkpoint, make_stream, run_sft
    from gti.sft.trainer import micro_batches

    with tempfile.TemporaryDirectory() as tmp:
        cfg = route_config(init, Path(tmp) / "sft", route, steps + 1, bf16)
        run_sft(cfg)
        log = [json.loads(x) for x in (cfg.out / "train_log.jsonl").read_text().splitlines()]
        autocast = bool(json.loads((cfg.out / "sft_config.json").read_text())["cpu_bf16_autocast"])
        _, tokenizer, sids = load_checkpoint(init, torch.float32)
        task = load_task_data(
            sids, dataset_of(sids, None, init), k_core_min=5, max_history=cfg.max_history
        )
        stream = make_stream(cfg, tokenizer, task)
    seconds = sum(r["seconds"] for r in log[1:]) / steps
    real = padded = flops = 0.0
    for step in range(1, steps + 1):
        for group in micro_batches(step, cfg, 0, 1, getattr(stream, "length", None)):
            b = stream.batch(group)
            lengths = b.attention_mask.sum(1).double()  # (B,)
            real += float(lengths.sum())
            padded += b.input_ids.numel()
            T = b.input_ids.shape[1]  # the forward runs over the padded batch
            fwd = shape.forward_flops(b.input_ids.numel(), (T + 1) / 2)
            # the head projects only the positions that predict an answer token
            projected = float(b.answer_mask[:, 1:].sum())
            flops += 3 * (fwd + shape.head_flops(projected))
    per_epoch = stream.epoch_size / cfg.batch_size  # steps
    return {
        "seconds_per_step": seconds,
        "tokens_per_s": real / steps / seconds,
        "padding_share": 1 - real / padded,
        "examples_per_epoch": stream.epoch_size,
        "epoch_hours": per_epoch * seconds / 3600,
        "achieved_flops": flops / steps / seconds,
        "bf16_autocast": autocast,
    }


def compare_routes(init: Path, steps: int, bf16: str) -> dict[str, object]:
    from gti.sft.run import load_checkpoint

    model, _, _ = load_checkpoint(init, torch.float32)
    shape = Shape.of(model)
    del model
    peaks = {}  # per dtype the steps computed in, measured once
    out: dict[str, object] = {"bf16": bf16}
    for route in ROUTES:
        fig = route_figures(init, route, steps, shape, bf16)
        dtype = torch.bfloat16 if fig["bf16_autocast"] else torch.float32
        if dtype not in peaks:
            peaks[dtype] = matmul_peak(dtype)
        peak = fig["matmul_peak_flops"] = peaks[dtype]
        fig["mfu"] = fig["achieved_flops"] / peak
        out[route] = fig
        print(
            f"  {route:8s}: {fig['tokens_per_s']:6.1f} tokens/s ({fig['padding_share']:.1%} "
            f"padding), {fig['seconds_per_step']:5.1f} s/step, {fig['examples_per_epoch']:,} "
            f"examples/epoch -> {fig['epoch_hours']:6.2f} h/epoch; MFU {fig['mfu']:.1%} "
            f"of {peak / 1e9:.0f} GFLOP/s ({'bf16' if fig['bf16_autocast'] else 'fp32'})"
        )
    ratio = out["sequence"]["epoch_hours"] / out["example"]["epoch_hours"]  # type: ignore[index]
    out["epoch_time_ratio"] = ratio
    print(f"  sequence epoch / example epoch: {ratio:.4f} (goal <= 0.1)")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--routes", type=Path, default=None, help="a gti init checkpoint")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--length", type=int, default=100)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--cache-dir", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--bf16", choices=("off", "on", "auto"), default="off",
        help="--routes: autocast of both routes (off: float32, as the study trains)",
    )  # fmt: skip
    args = ap.parse_args()
    if args.routes is not None:
        cpu = next(
            (
                x.split(":", 1)[1].strip()
                for x in open("/proc/cpuinfo")
                if x.startswith("model name")
            ),
            "unknown CPU",
        )
        print(
            f"{cpu}, threads {torch.get_num_threads()}, load average {os.getloadavg()[0]:.1f}; "
            f"{args.steps} steps per route after one warm-up"
        )
        result = compare_routes(args.routes, args.steps, args.bf16)
        if args.json:
            args.json.write_text(json.dumps(result, indent=1))
        return

    model, _ = resolve_backbone(args.model, cache_dir=args.cache_dir).load()
    shape = Shape.of(model)
    g = torch.Generator().manual_seed(0)
    batch = torch.randint(0, shape.vocab, (args.batch_size, args.length), generator=g)
    tokens = args.batch_size * args.length
    forward = shape.forward_flops(tokens, (args.length + 1) / 2) + shape.head_flops(tokens)
    flops = 3 * forward  # forward + backward (activation and weight gradients)
    load_avg = os.getloadavg()[0]
    print(
        f"{args.model}: {args.batch_size} x {args.length} tokens per step, "
        f"{flops / 1e12:.2f} TFLOP per step; threads {torch.get_num_threads()}, "
        f"load average {load_avg:.1f}"
    )
    result: dict[str, object] = {"flops_per_step": flops, "load_average_at_start": load_avg}
    dtypes = [("fp32", torch.float32, False)]
    if bf16_supported():
        dtypes.append(("bf16", torch.bfloat16, True))
    for name, dtype, bf16 in dtypes:
        peak = matmul_peak(dtype)
        seconds = sft_seconds(model, batch, args.steps, bf16)
        achieved = flops / seconds
        result[name] = {
            "peak_flops": peak,
            "achieved_flops": achieved,
            "mfu": achieved / peak,
            "tokens_per_s": tokens / seconds,
            "seconds_per_step": seconds,
        }
        print(
            f"  {name}: {tokens / seconds:6.1f} tokens/s, {achieved / 1e9:6.1f} GFLOP/s, "
            f"matmul peak {peak / 1e9:6.1f} GFLOP/s -> MFU {achieved / peak:.1%}"
        )
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
