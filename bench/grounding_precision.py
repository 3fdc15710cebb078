"""Seconds per grounding step in fp32 and bf16 autocast, with activation checkpointing off
and on (``gti init --bf16 --gradient-checkpointing``), as ``gti init`` runs the step
(:func:`gti.init.trainer.train_grounding`, one step per call).

SmolLM2-135M (gti's cached conversion), the SIDs of ``--sids`` over MovieLens-100k, from
the mean, batch 32 (the cpu preset's). The four settings run interleaved step by step in
one process: each round draws one batch (``PairStream`` seeded with the round) and runs it
under all four, each in turn first, so a change in the machine's load hits them alike.
Round 0 is a warm-up and not counted; medians of the wall and process CPU seconds of the
rounds after it. Peak memory is a process's, not this one's: run ``gti init --steps 4``
once per setting under ``/usr/bin/time -v`` (docs/performance.md).

Usage: PYTHONPATH=. .venv/bin/python bench/grounding_precision.py --sids SIDS
       [--objective ce|distill|ce+distill] [--rounds 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import time
from dataclasses import replace
from pathlib import Path

import torch

from geodiag.io.vocabulary.sidecar import load
from gti.data.sources import load_dataset
from gti.init import InitContext
from gti.init.config import GroundingConfig
from gti.init.distill import distill_stream
from gti.init.grounding import NewRows, freeze
from gti.init.pairs import PairStream
from gti.init.run import apply_row_init
from gti.init.trainer import train_grounding
from gti.models.backbone import resolve_backbone
from gti.prompts import sid_strings
from gti.vocab import extend_vocabulary

SETTINGS = list(itertools.product((False, True), (False, True)))  # (bf16, checkpointing)


def name(bf16: bool, checkpointing: bool) -> str:
    return f"{'bf16' if bf16 else 'fp32'}, checkpointing {'on' if checkpointing else 'off'}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sids", type=Path, required=True, help="a `gti sids build` folder")
    ap.add_argument("--objective", default="ce")
    ap.add_argument("--rounds", type=int, default=3, help="counted rounds (after a warm-up)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    sids = load(args.sids)
    catalog = load_dataset("movielens-100k", None).catalog
    items = list(sids.items)
    texts = [catalog.items[catalog.index(i)].text for i in items]
    model, tok = resolve_backbone("smollm2-135m").load()
    ext = extend_vocabulary(model, tok, sids)
    apply_row_init(model, ext, "mean", torch.Generator().manual_seed(0), InitContext())
    freeze(model)
    base = GroundingConfig(
        steps=1, batch_size=args.batch_size, lr=5e-3, objective=args.objective, progress=False
    )
    rows = {s: NewRows(model, ext) for s in SETTINGS}  # each setting trains its own rows
    took = {s: {"wall": [], "cpu": []} for s in SETTINGS}
    print(f"{args.objective}: threads {torch.get_num_threads()}, load {os.getloadavg()}")
    for r in range(args.rounds + 1):
        slot = rows[SETTINGS[0]].slot.cpu()
        stream = PairStream(
            tok, texts, sid_strings(sids, items), slot, batch_size=args.batch_size, seed=r
        )
        distill = distill_stream(tok, stream.texts, stream.sid_strings, slot, replace(base, seed=r))
        for s in SETTINGS[r % 4 :] + SETTINGS[: r % 4]:
            cfg = replace(base, bf16=s[0], gradient_checkpointing=s[1])
            wall, cpu = time.perf_counter(), time.process_time()
            train_grounding(model, rows[s], stream, cfg, distill=distill)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            load_now = os.getloadavg()[0]
            print(f"round {r} {name(*s)}: wall {wall:.1f} s, cpu {cpu:.1f} s, load {load_now:.1f}")
            if r:
                took[s]["wall"].append(wall)
                took[s]["cpu"].append(cpu)
    summary = {
        name(*s): {
            "wall_median": statistics.median(t["wall"]),
            "cpu_median": statistics.median(t["cpu"]),
            **t,
        }
        for s, t in took.items()
    }
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
