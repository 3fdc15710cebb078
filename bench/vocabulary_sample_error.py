"""How far a remote checkpoint's sampled vocabulary figures lie from the full pass, and
whether their stated standard error covers it; prints both and the rows each reads.

The embedding of SmolLM2-135M (49,152 x 576, converted once by gti), sampled the way a
remote checkpoint is (``geodiag.metrics.vocabulary_sample``: K blocks of consecutive rows,
one at a seeded offset in each of K equal strata) with the sample sizes given, over
--seeds seeds each: the RMS and largest relative error of the spread against the exact
spread of every row (``geodiag.metrics.untrained.VocabularyAccumulator``, what a local
check computes), and the median stated relative standard error. A stated error below the
RMS error understates it; this is what sets ``AnalyzeOptions.vocabulary_block_min_rows``.

Usage: PYTHONPATH=. .venv/bin/python bench/vocabulary_sample_error.py
       [--sizes 20,40,100,200,400,768,2000,20000] [--seeds 30] [--blocks 20]
"""

from __future__ import annotations

import argparse

import numpy as np

from geodiag.io.formats.safetensors import SafetensorsFile
from geodiag.metrics.untrained import VocabularyAccumulator
from geodiag.metrics.vocabulary_sample import BlockFigures, sample_blocks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="20,40,100,200,400,768,2000,20000")
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--blocks", type=int, default=20)
    args = ap.parse_args()
    from gti.models.smollm2 import ensure_converted

    f = SafetensorsFile(ensure_converted() / "model.safetensors")
    name = next(k for k in f.keys() if k.endswith("embed_tokens.weight"))
    emb = f.read(name).astype(np.float32)
    n_rows = len(emb)
    full = VocabularyAccumulator()
    full.add(np.arange(n_rows), emb)
    exact = full.result().spread
    print(f"{name} {emb.shape}: exact spread {exact:.6g} from every row")
    print(f"{'rows':>6} {'a block':>7} {'RMS error':>9} {'largest':>8} {'stated SE':>9}")
    for size in (int(s) for s in args.sizes.split(",")):
        errors, stated = [], []
        for seed in range(args.seeds):
            spans = sample_blocks(n_rows, size, args.blocks, seed)
            figures = BlockFigures(spans)
            for a, b in spans:
                figures.add(np.arange(a, b), emb[a:b])
            r = figures.result(n_rows, seed)
            errors.append(r.spread / exact - 1.0)
            stated.append(r.spread_se / r.spread)
        e = np.asarray(errors)
        print(
            f"{size:6d} {size // args.blocks:7d} {np.sqrt(np.mean(e**2)):9.2%} "
            f"{np.abs(e).max():8.2%} {np.median(stated):9.2%}"
        )


if __name__ == "__main__":
    main()
