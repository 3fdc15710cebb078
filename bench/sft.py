"""SFT step throughput and model FLOPs utilisation, fp32 and bf16 autocast.

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
import json
import os
import time
from pathlib import Path

import torch
from mfu import Shape, bf16_supported, matmul_peak

from gti.models.backbone import resolve_backbone


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--length", type=int, default=100)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--cache-dir", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

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
