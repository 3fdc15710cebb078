"""GeodiagCallback's cost per measurement, against the naive route (the full analysis).

1. 1,000 new rows x 1,000 dims (synthetic; 20,000 original rows; 4 levels x 250 codes):
   ``GeodiagCallback.measure`` (the cheap snapshot) versus ``geodiag.measure`` with the
   neighbour scan off (every spectrum, every level's RSA with 1,000 permutations).
2. SmolLM2-135M (the converted model in gti's cache) resized by 768 rows the way
   transformers' ``mean_resizing`` does, levels a/b/c x 256 and the RQ-VAE codebooks of
   the MovieLens-100k SIDs: the overhead of one ``on_step_end`` call that measures
   (snapshot, JSONL line, queued logs), and the full analysis for comparison.

Medians of ``--repeats`` calls after one warm-up. Prints the CPU and the load average.

Usage: .venv/bin/python bench/callback.py [--sids /work/scratch/ml100k/sids] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

import geodiag
from geodiag.trainer import GeodiagCallback


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(
            line.split(":", 1)[1].strip() for line in out.splitlines() if "Model name" in line
        )
    except (OSError, StopIteration):
        return platform.processor() or "unknown"


def timed(fn, repeats: int) -> float:
    fn()  # warm-up: imports, allocations
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def synthetic(repeats: int) -> None:
    rng = np.random.default_rng(0)
    n_orig, n_new, dim, n_levels = 20_000, 1_000, 1_000, 4
    emb = rng.normal(size=(n_orig + n_new, dim)).astype(np.float32)
    per = n_new // n_levels
    levels = {
        chr(97 + i): list(range(n_orig + i * per, n_orig + (i + 1) * per)) for i in range(n_levels)
    }
    books = {name: rng.normal(size=(per, 32)) for name in levels}
    cb = GeodiagCallback(levels=levels, codebooks=books)
    cheap = timed(lambda: cb.measure(emb), repeats)
    full = timed(lambda: geodiag.measure(emb, levels=levels, codebooks=books, neighbors=0), repeats)
    print(f"synthetic {n_new} x {dim}: snapshot {cheap:.3f} s; full analysis {full:.3f} s; "
          f"ratio {full / cheap:.1f}x")  # fmt: skip


def smollm(sids: Path, repeats: int) -> None:
    import torch
    from transformers import AutoModelForCausalLM, TrainerControl, TrainerState

    from geodiag import sidecar

    model_dir = (
        Path(os.environ.get("GTI_CACHE", Path.home() / ".cache/gti")) / "models/smollm2-135m"
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    side = sidecar.load(sids / sidecar.FILENAME)
    base = model.get_input_embeddings().weight.shape[0]
    n_new = sum(lv.size for lv in side.levels)
    model.resize_token_embeddings(base + n_new, mean_resizing=True)
    levels, next_id = {}, base
    for lv in side.levels:
        levels[lv.name] = list(range(next_id, next_id + lv.size))
        next_id += lv.size
    books = sids / sidecar.CODEBOOKS_FILENAME
    with tempfile.TemporaryDirectory() as out:
        cb = GeodiagCallback(levels=levels, codebooks=books, every_n_steps=1)
        args = SimpleNamespace(output_dir=out, report_to=[])
        state = TrainerState(global_step=1, max_steps=10, is_world_process_zero=True)
        call = timed(lambda: cb.on_step_end(args, state, TrainerControl(), model=model), repeats)
    full = timed(
        lambda: geodiag.measure(model, levels=levels, codebooks=books, neighbors=0), repeats
    )
    print(f"SmolLM2-135M + {n_new} mean-resized rows ({model.config.hidden_size} dims, "
          f"vocab {base + n_new}): on_step_end with a snapshot {call:.3f} s; "
          f"full analysis {full:.3f} s; ratio {full / call:.1f}x")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sids", type=Path, default=Path("/work/scratch/ml100k/sids"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--skip-model", action="store_true")
    a = ap.parse_args()
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; load average before: {os.getloadavg()}")
    synthetic(a.repeats)
    if not a.skip_model:
        smollm(a.sids, a.repeats)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
