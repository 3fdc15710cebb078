"""Exploration harness for issue 11: one grounding run with the structure curve.

    .venv/bin/python reports/grounding/probes/ground.py --sids runs/ml100k/sids --out runs/probe/X \
        --optimizer lazy-adam --lr 1e-2 --seconds 300 --every 10

Writes OUT/log.jsonl (per-step losses, structure entries, optional diagnostics)
and OUT/summary.json. Not part of the package: the chosen options move to gti.init.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from geodiag.io.formats.safetensors import SafetensorsFile
from geodiag.io.vocabulary.sidecar import CODEBOOKS_FILENAME, load
from gti.data.sources import load_dataset
from gti.init import InitContext
from gti.init.grounding import NewRows, SharedPrefix, fast_loss, freeze
from gti.init.optim import LazyAdam, make_row_optimizer, present_rows
from gti.init.pairs import PairStream
from gti.init.run import apply_row_init, sid_strings
from gti.init.structure import ProbeItems, StructureProbe, structure_entry
from gti.models.backbone import resolve_backbone
from gti.vocab import extend_vocabulary


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sids", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--start", default="mean")
    ap.add_argument("--optimizer", default="adamw")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--steps", type=int, default=10**9)
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--decay-steps", type=int, default=0, help="cosine to 0 over this many")
    ap.add_argument("--repeats", default="1,1")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--diagnose", action="store_true")
    ap.add_argument("--permutations", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    logf = open(args.out / "log.jsonl", "w")

    def emit(d):
        logf.write(json.dumps(d) + "\n")
        logf.flush()

    emit({"args": {k: str(v) for k, v in vars(args).items()}, "load": os.getloadavg()})
    sids = load(args.sids)
    sf = SafetensorsFile(args.sids / CODEBOOKS_FILENAME)
    books = {lv.name: sf.read(lv.name).astype(np.float64) for lv in sids.levels}
    catalog = load_dataset("movielens-100k", None).catalog
    items = list(sids.items)
    texts = [catalog.items[catalog.index(i)].text for i in items]
    model, tok = resolve_backbone("smollm2-135m").load()
    ext = extend_vocabulary(model, tok, sids)
    ctx = InitContext(sids=sids, item_texts=dict(zip(items, texts, strict=False)), tokenizer=tok)
    apply_row_init(model, ext, args.start, torch.Generator().manual_seed(args.seed), ctx)
    freeze(model)
    rows = NewRows(model, ext)
    rep = tuple(int(x) for x in args.repeats.split(","))
    stream = PairStream(
        tok,
        texts,
        sid_strings(sids, items),
        rows.slot,
        batch_size=args.batch_size,
        seed=args.seed,
        repeats=rep,
    )
    prefix = stream.common_prefix()
    shared = SharedPrefix(model, prefix) if prefix else None
    probe = StructureProbe(
        model,
        tok,
        rows,
        ProbeItems(
            texts,
            np.array([sids.items[i] for i in items]),
            [lv.name for lv in sids.levels],
            [lv.size for lv in sids.levels],
            books,
        ),
        base_vocab_size=ext.base_vocab_size,
        permutations=args.permutations,
        seed=0,
    )
    emit({"probe_setup_s": probe.setup_s})
    opt = make_row_optimizer([rows.inp], args.optimizer, lr=args.lr, eps=args.eps)
    rows0 = rows.inp.detach().clone()

    def lr_at(step):
        f = 1.0
        if args.warmup:
            f = min(1.0, (step + 1) / args.warmup)
        if args.decay_steps:
            f *= 0.5 * (1 + math.cos(math.pi * min(step, args.decay_steps) / args.decay_steps))
        return args.lr * f

    e = structure_entry(0, 0.0, probe)
    emit(e)
    print(json.dumps(e), flush=True)
    train_s, measure_s, step = 0.0, e["measure_s"], 0
    while step < args.steps and train_s < args.seconds:
        t0 = time.perf_counter()
        c0 = time.process_time()
        batch = stream.batch(step)
        for gr in opt.param_groups:
            gr["lr"] = lr_at(step)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            out = fast_loss(model, rows, batch, shared=shared)
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        present = present_rows(batch.input_ids, rows.slot)
        if args.diagnose:
            before = rows.inp.detach().clone()
            g = rows.inp.grad.detach()
            mask = torch.zeros(len(g), dtype=torch.bool)
            mask[present] = True
        if isinstance(opt, LazyAdam):
            opt.step(present)
        else:
            opt.step()
        step += 1
        dt = time.perf_counter() - t0
        train_s += dt
        rec = {
            "step": step,
            "loss": float(out.loss.detach()),
            "seconds": round(dt, 3),
            "cpu_seconds": round(time.process_time() - c0, 3),
            "load1": os.getloadavg()[0],
            "answer_tokens": int(out.token_losses.numel()),
            "loss_t2s": float(out.token_losses[out.token_direction == 0].mean())
            if (out.token_direction == 0).any()
            else None,
            "loss_s2t": float(out.token_losses[out.token_direction == 1].mean())
            if (out.token_direction == 1).any()
            else None,
        }
        if args.diagnose:
            upd = rows.inp.detach() - before
            gn, un = g.norm(dim=1), upd.norm(dim=1)
            drift = rows.inp.detach() - rows0
            common = drift.mean(0)
            rec["diag"] = {
                "n_present": int(mask.sum()),
                "grad_present": float(gn[mask].mean()),
                "grad_absent": float(gn[~mask].mean()),
                "upd_present": float(un[mask].mean()),
                "upd_absent": float(un[~mask].mean()),
                "drift_rms": float(drift.pow(2).sum(1).mean().sqrt()),
                "drift_common_share": float(
                    len(drift) * common.pow(2).sum() / drift.pow(2).sum().clamp(min=1e-30)
                ),
            }
        emit(rec)
        if step % args.every == 0:
            e = structure_entry(step, train_s, probe)
            measure_s += e["measure_s"]
            emit(e)
            s = e["structure"]
            print(
                step,
                round(train_s),
                rec["loss"],
                s["rsa"],
                s["code_accuracy"],
                s["mean_pairwise_cosine"],
                s["spread_relative"],
                e["measure_s"],
                flush=True,
            )
    e = structure_entry(step, train_s, probe)
    measure_s += e["measure_s"]
    emit(e)
    summ = {
        "steps": step,
        "train_s": train_s,
        "measure_s": measure_s,
        "final": e,
        "load_end": os.getloadavg(),
    }
    (args.out / "summary.json").write_text(json.dumps(summ, indent=1))
    torch.save(rows.inp.detach(), args.out / "rows.pt")
    print(json.dumps(summ), flush=True)


if __name__ == "__main__":
    sys.exit(main())
