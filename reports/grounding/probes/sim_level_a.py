"""Offline simulation of the text->SID level-a loss: frozen hidden states h of item
prompts (the probe's held-out template), the frozen old-vocabulary logits as part of
the softmax normaliser, and only the 768 new rows trained (tied head). Compares
optimizers by level-a RSA against the codebook after E examples, in seconds.

Saves/loads the h's in runs/probe/sim_h.pt (one forward of N prompts)."""

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from geodiag.io.formats.safetensors import SafetensorsFile
from geodiag.metrics.rsa import rsa
from geodiag.io.vocabulary.sidecar import load

torch.manual_seed(0)
cache = Path("runs/probe/sim_h.pt")
sids = load("runs/ml100k/sids")
items = list(sids.items)
codes = np.array([sids.items[i] for i in items])
book = SafetensorsFile(Path("runs/ml100k/sids/codebooks.safetensors")).read("a").astype(np.float64)
if not cache.exists():
    from gti.data.sources import load_dataset
    from gti.init import InitContext
    from gti.init.grounding import NewRows, freeze
    from gti.init.run import apply_row_init
    from gti.init.structure import ProbeItems, StructureProbe
    from gti.models.backbone import resolve_backbone
    from gti.vocab import extend_vocabulary

    catalog = load_dataset("movielens-100k", None).catalog
    texts = [catalog.items[catalog.index(i)].text for i in items]
    model, tok = resolve_backbone("smollm2-135m").load()
    ext = extend_vocabulary(model, tok, sids)
    apply_row_init(model, ext, "mean", torch.Generator().manual_seed(0), InitContext())
    freeze(model)
    rows = NewRows(model, ext)
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 512
    probe = StructureProbe(
        model,
        tok,
        rows,
        ProbeItems(texts, codes, ["a", "b", "c"], [256] * 3, {"a": book, "b": book, "c": book}),
        base_vocab_size=ext.base_vocab_size,
        permutations=0,
        n_probe_items=n,
    )
    h = torch.empty(len(probe.sample), 576)
    for chunk, enc in zip(probe._chunks, probe._encoded, strict=False):
        h[torch.tensor(chunk)] = enc["h"]
    old = model.get_input_embeddings().weight[: ext.base_vocab_size].detach()
    torch.save(
        {
            "h": h,
            "sample": torch.from_numpy(probe.sample),
            "old_lse_bias": None,
            "mean": rows.inp.detach()[0].clone(),
            "old": old,
        },
        cache,
    )
d = torch.load(cache)
h, sample, mean, old = d["h"], d["sample"].numpy(), d["mean"], d["old"]
old_logits = h @ old.T  # (n, V_old) fixed
y = torch.from_numpy(codes[sample, 0]).long()
n = len(y)


def run(opt_kind, lr, examples=2000, batch=8, eps=1e-8, rowwise=False, warmup=0, cosine=False):
    from gti.init.optim import get_lr

    W = mean.repeat(256, 1).clone().requires_grad_(True)  # level-a rows only
    if opt_kind == "sgd":
        opt = torch.optim.SGD([W], lr=lr)
    elif opt_kind == "adam":
        opt = torch.optim.Adam([W], lr=lr, eps=eps)
    if opt_kind == "adagrad":
        opt = torch.optim.Adagrad([W], lr=lr, eps=eps)
    from gti.init.optim import LazyAdam

    if opt_kind == "lazy":
        opt = LazyAdam([W], lr=lr, eps=eps)
    g = torch.Generator().manual_seed(0)
    steps = examples // batch
    for s in range(steps):
        for gr in opt.param_groups:
            gr["lr"] = get_lr(s, lr, warmup, "cosine" if cosine else "none", steps)
        idx = torch.randint(0, n, (batch,), generator=g)
        logits = torch.cat([old_logits[idx], h[idx] @ W.T], 1)
        loss = torch.nn.functional.cross_entropy(logits, y[idx] + old.shape[0])
        opt.zero_grad()
        loss.backward()
        if rowwise:  # row-normalised: keep each row's gradient direction
            with torch.no_grad():
                W.grad /= W.grad.norm(dim=1, keepdim=True).clamp(min=1e-12)
                W.grad *= W.grad.norm(dim=1, keepdim=True) > 0
        if opt_kind == "lazy":
            opt.step(torch.unique(y[idx]))
        else:
            opt.step()
    x = W.detach().double().numpy()
    seen = np.unique(y.numpy())
    r_all = rsa(x, book, n_permutations=0).spearman
    r_seen = rsa(x[seen], book[seen], n_permutations=0).spearman
    acc = float(((h @ W.T).argmax(1) == y).double().mean())
    x - x.mean(0)
    cos = x / np.linalg.norm(x, axis=1, keepdims=True)
    mc = float((cos @ cos.T).mean())
    return {
        "opt": opt_kind,
        "lr": lr,
        "batch": batch,
        "warmup": warmup,
        "cosine": cosine,
        "rowwise": rowwise,
        "eps": eps,
        "examples": examples,
        "rsa_all": r_all,
        "rsa_seen": r_seen,
        "train_acc": acc,
        "mean_cos": mc,
        "loss": float(loss),
    }


if __name__ == "__main__":
    print(json.dumps({"n_items": n, "codes_seen": int(len(np.unique(y.numpy())))}))
    for cfg in [
        {("opt_kind" if k == "opt" else k): v for k, v in c.items()}
        for c in json.loads(sys.argv[2] if len(sys.argv) > 2 else "[]")
    ]:
        t0 = time.time()
        r = run(**cfg)
        r["s"] = round(time.time() - t0, 1)
        print(
            json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}),
            flush=True,
        )
