"""Seconds per grounding step with 1 vs 2 torch threads, and per structure measurement part."""

import json
import os
import sys
import time

import torch

from geodiag.io.vocabulary.sidecar import load
from gti.data.sources import load_dataset
from gti.init import InitContext
from gti.init.grounding import NewRows, SharedPrefix, fast_loss, freeze
from gti.init.pairs import PairStream
from gti.init.run import apply_row_init, sid_strings
from gti.models.backbone import resolve_backbone
from gti.vocab import extend_vocabulary

sids = load("runs/ml100k/sids")
catalog = load_dataset("movielens-100k", None).catalog
items = list(sids.items)
texts = [catalog.items[catalog.index(i)].text for i in items]
model, tok = resolve_backbone("smollm2-135m").load()
ext = extend_vocabulary(model, tok, sids)
apply_row_init(model, ext, "mean", torch.Generator().manual_seed(0), InitContext())
freeze(model)
rows = NewRows(model, ext)
stream = PairStream(tok, texts, sid_strings(sids, items), rows.slot, batch_size=16, seed=0)
shared = SharedPrefix(model, stream.common_prefix())
for threads, bf16 in [(int(x), b) for x in sys.argv[1].split(",") for b in (False, True)]:
    torch.set_num_threads(threads)
    for d in (0, 1):
        t0 = time.perf_counter()
        c0 = time.process_time()
        n = 0
        for s in range(40):
            b = stream.batch(s)
            keep = b.direction == d
            if keep.sum() == 0:
                continue
            import dataclasses

            bb = type(b)(**{f.name: getattr(b, f.name)[keep] for f in dataclasses.fields(b)})
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                out = fast_loss(model, rows, bb, shared=shared)
            out.loss.backward()
            rows.inp.grad = None
            n += int(keep.sum())
            if n >= 24:
                break
        dt = time.perf_counter() - t0
        print(
            json.dumps(
                {
                    "threads": threads,
                    "bf16": bf16,
                    "direction": d,
                    "examples": n,
                    "s_per_example": dt / n,
                    "cpu_s_per_example": (time.process_time() - c0) / n,
                    "load": os.getloadavg(),
                }
            ),
            flush=True,
        )
