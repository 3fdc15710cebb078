"""GeodiagCallback's cost per measurement, against the naive route (the full analysis).

1. 1,000 new rows x 1,000 dims (synthetic; 20,000 original rows; 4 levels x 250 codes):
   ``GeodiagCallback.measure`` (the cheap snapshot) versus ``geodiag.measure`` with the
   neighbour scan off (every spectrum, every level's RSA with 1,000 permutations).
2. SmolLM2-135M (the converted model in gti's cache) resized by 768 rows the way
   transformers' ``mean_resizing`` does, levels a/b/c x 256 and the RQ-VAE codebooks of
   the MovieLens-100k SIDs: the overhead of one ``on_step_end`` call that measures
   (snapshot, JSONL line, queued logs), and the full analysis for comparison.
3. With ``--trainer-steps N``: the same model in a real ``Trainer`` run of N steps
   (random text + SID sequences, batch 2, a snapshot every 2 steps), timing each
   ``on_step_end``.

Medians of ``--repeats`` calls after one warm-up. Prints the CPU and the load average.

Usage: .venv/bin/python bench/callback.py [--sids /work/scratch/ml100k/sids] [--repeats 5]
       [--trainer-steps 8]
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
from geodiag.callback import GeodiagCallback


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
    print(
        f"synthetic {n_new} x {dim}: snapshot {cheap:.3f} s; full analysis {full:.3f} s; "
        f"ratio {full / cheap:.1f}x"
    )


def smollm_with_sids(sids: Path):
    """SmolLM2-135M resized by the SIDs' rows (mean_resizing), {level: ids}, codebooks, items."""
    import torch
    from transformers import AutoModelForCausalLM

    from geodiag.io.vocabulary import sidecar

    cache = Path(os.environ.get("GTI_CACHE", Path.home() / ".cache/gti"))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(cache / "models/smollm2-135m", dtype=torch.float32)
    side = sidecar.load(sids / sidecar.FILENAME)
    base = model.get_input_embeddings().weight.shape[0]
    model.resize_token_embeddings(base + sum(lv.size for lv in side.levels), mean_resizing=True)
    levels, next_id = {}, base
    for lv in side.levels:
        levels[lv.name] = list(range(next_id, next_id + lv.size))
        next_id += lv.size
    return model, levels, sids / sidecar.CODEBOOKS_FILENAME, list(side.items.values())


def smollm(sids: Path, repeats: int) -> None:
    from transformers import TrainerControl, TrainerState

    model, levels, books, _ = smollm_with_sids(sids)
    n_new = sum(len(v) for v in levels.values())
    with tempfile.TemporaryDirectory() as out:
        cb = GeodiagCallback(levels=levels, codebooks=books, every_n_steps=1)
        args = SimpleNamespace(output_dir=out, report_to=[])
        state = TrainerState(global_step=1, max_steps=10, is_world_process_zero=True)
        call = timed(lambda: cb.on_step_end(args, state, TrainerControl(), model=model), repeats)
    full = timed(
        lambda: geodiag.measure(model, levels=levels, codebooks=books, neighbors=0), repeats
    )
    print(
        f"SmolLM2-135M + {n_new} mean-resized rows ({model.config.hidden_size} dims, "
        f"vocab {model.config.vocab_size}): on_step_end with a snapshot {call:.3f} s; "
        f"full analysis {full:.3f} s; ratio {full / call:.1f}x"
    )


def in_trainer(sids: Path, steps: int) -> None:
    """Each on_step_end timed inside a real Trainer run (every 2 steps measures)."""
    import torch
    from transformers import Trainer, TrainingArguments

    model, levels, books, items = smollm_with_sids(sids)
    base, width = min(levels["a"]), len(levels["a"])

    class Sequences(torch.utils.data.Dataset):
        def __len__(self):
            return 10_000

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            sid = [base + width * lv + c for lv, c in enumerate(items[i % len(items)])]
            x = torch.cat([torch.randint(0, base, (20,), generator=g), torch.tensor(sid)])
            return {"input_ids": x, "labels": x}

    cb = GeodiagCallback(levels=levels, codebooks=books, every_n_steps=2)
    times: list[tuple[int, float]] = []
    inner = cb.on_step_end

    def on_step_end(args, state, control, **kw):
        t = time.perf_counter()
        out = inner(args, state, control, **kw)
        times.append((state.global_step, time.perf_counter() - t))
        return out

    cb.on_step_end = on_step_end
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out,
            max_steps=steps,
            per_device_train_batch_size=2,
            learning_rate=1e-3,
            logging_steps=steps,
            save_strategy="no",
            report_to="none",
            use_cpu=True,
            disable_tqdm=True,
        )
        trainer = Trainer(model=model, args=args, train_dataset=Sequences(), callbacks=[cb])
        cb.attach(trainer)
        t0 = time.perf_counter()
        trainer.train()
        total = time.perf_counter() - t0
    measuring = [t for s, t in times if s % 2 == 0]
    other = [t for s, t in times if s % 2]
    print(
        f"Trainer run, {steps} steps in {total:.1f} s: measuring on_step_end median "
        f"{statistics.median(measuring):.3f} s (range {min(measuring):.3f}-{max(measuring):.3f}), "
        f"other steps {statistics.median(other) * 1e6:.0f} us"
    )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sids", type=Path, default=Path("/work/scratch/ml100k/sids"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--skip-model", action="store_true")
    ap.add_argument("--trainer-steps", type=int, default=0, help="also time a Trainer run")
    a = ap.parse_args()
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; load average before: {os.getloadavg()}")
    synthetic(a.repeats)
    if not a.skip_model:
        smollm(a.sids, a.repeats)
    if a.trainer_steps:
        in_trainer(a.sids, a.trainer_steps)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
