"""False-positive rate of the fed-token rule (geodiag.analysis.fed) on a healthy
checkpoint's whole vocabulary (issue 38, item 2): every token is taken as fed once by a
data file, and the rows the rule calls untrained (at zero, at the vocabulary mean,
identical to another) are counted and named. On a pretrained model every such row is a
false positive unless the model really ships untrained rows.

Usage: PYTHONPATH=. .venv/bin/python bench/fed_false_positives.py CHECKPOINT [--new-tokens A:B]
(default: the last row is the one "new" token, so every other row is judged).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from geodiag.analysis.fed import fed_rows
from geodiag.io.checkpoint import open_checkpoint
from geodiag.io.sources.options import ReadOptions
from geodiag.io.usage import TokenUsage, UsageSource
from geodiag.metrics.untrained import vocabulary_stats


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("--new-tokens", default=None)
    args = ap.parse_args()
    probe = open_checkpoint(args.checkpoint, ReadOptions(all_rows_new=False, new_tokens=(0, 1)))
    n_rows = probe.matrices[0].n_rows
    span = args.new_tokens or f"{n_rows - 1}:{n_rows}"
    a, b = (int(x) for x in span.split(":"))
    ckpt = open_checkpoint(args.checkpoint, ReadOptions(new_tokens=(a, b)))
    start = time.time()
    ids = np.setdiff1d(np.arange(n_rows), ckpt.new.ids)
    source = UsageSource("all-tokens", "data", "-", len(ids), "records", True, "every id")
    usage = TokenUsage(
        [source],
        np.zeros((1, len(ckpt.new.ids)), np.int64),
        [],
        ids,
        np.ones((1, len(ids)), np.int64),
    )
    for m in ckpt.matrices:
        vocab = vocabulary_stats(block for _, block in ckpt.iter_original(m))
        fed = fed_rows(ckpt, m, vocab, usage, seed=0)
        kinds = {}
        for t in fed.tokens:
            kinds[t.findings[0]] = kinds.get(t.findings[0], 0) + 1
        names = ", ".join(repr(t.token) for t in fed.tokens[:12])
        print(
            f"{m.role} {m.tensor}: {fed.n_untrained} of {fed.n_fed} rows flagged "
            f"({fed.n_untrained / fed.n_fed:.3%}), by first finding {kinds}; tolerance "
            f"{fed.tolerance:.3g}; {names}"
        )
    print(f"{time.time() - start:.1f} s")


if __name__ == "__main__":
    main()
