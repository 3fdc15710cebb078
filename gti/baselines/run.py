"""``run_baselines``: fit the baselines on the split's training sequences and write, per
baseline and split, the per-user top-``top`` lists and their metrics.

Layout under ``out``::

    <baseline>/valid.rankings.json, <baseline>/test.rankings.json   (gti.evaluate.rankings)
    <baseline>/metrics.json    Recall/NDCG@K per split with 95% bootstrap intervals

The users and targets are exactly those of ``leave_one_out(k_core(...))``, the
sequences the LM arms are fine-tuned and evaluated on.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from geodiag.atomic import atomic_write
from geodiag.errors import InputError
from gti.baselines.counting import LastItemTransitions, MostPopular, training_sequences
from gti.data.sequences import Splits, k_core, leave_one_out, user_sequences
from gti.data.sources import load_dataset
from gti.evaluate.rankings import (
    RANKING_KS,
    Rankings,
    from_unsorted,
    rankings_file,
    save_rankings,
)
from gti.evaluate.stats import DEFAULT_RESAMPLES, summarize_rankings

log = logging.getLogger(__name__)
COUNTING = {"most-popular": MostPopular, "transitions": LastItemTransitions}
BASELINES = tuple(COUNTING)  # SASRec runs in its own venv: scripts/sasrec_recbole.py


@dataclass
class SplitData:
    splits: Splits
    train_sequences: dict[str, list[str]]  # user -> training items, time order
    catalog: list[str]  # every item that can be ranked (the catalog, as the SID trie)


def load_split(data: str, *, k_core_min: int, max_history: int, cache_dir=None) -> SplitData:
    dataset = load_dataset(data, cache_dir)
    kept = k_core(dataset.interactions, k_core_min)
    if not kept:
        raise InputError("--k-core", f"no interactions of {data!r} survive {k_core_min}-core")
    return SplitData(
        splits=leave_one_out(kept, max_history),
        train_sequences=training_sequences(user_sequences(kept)),
        catalog=list(dataset.catalog.item_ids),
    )


def rank_split(
    split: str,
    examples: list,
    rank: Callable[[tuple[str, ...], int], list[str]],
    top: int,
    source: dict[str, object],
) -> Rankings:
    rows = [(e.user_id, e.target, rank(e.history, top)) for e in examples]
    return from_unsorted(split, rows, top, source)


def run_baselines(
    data: str,
    out: Path,
    *,
    baselines: tuple[str, ...] = ("most-popular", "transitions"),
    k_core_min: int = 5,
    max_history: int = 20,
    top: int = 20,
    ks: tuple[int, ...] = RANKING_KS,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    cache_dir: Path | None = None,
) -> dict[str, dict[str, object]]:
    """Fit and evaluate each baseline; returns ``{baseline: metrics.json contents}``."""
    unknown = [b for b in baselines if b not in BASELINES]
    if unknown:
        raise InputError("--baseline", f"unknown {unknown[0]!r}; choose from {BASELINES}")
    sd = load_split(data, k_core_min=k_core_min, max_history=max_history, cache_dir=cache_dir)
    results = {}
    for name in baselines:
        t0 = time.perf_counter()
        source: dict[str, object] = {
            "model": name,
            "data": data,
            "k_core": k_core_min,
            "max_history": max_history,
        }
        model = COUNTING[name]().fit(sd.train_sequences, sd.catalog)
        rankings = {
            s: rank_split(s, getattr(sd.splits, s), model.rank, top, source)
            for s in ("valid", "test")
        }
        seconds = time.perf_counter() - t0
        folder = Path(out) / name
        for split, r in rankings.items():
            save_rankings(folder / rankings_file(split), r)
        metrics = {
            "baseline": name,
            "fit": "training sequences (every item but the last two of each user)",
            "source": source,
            "seconds": round(seconds, 2),
            "splits": {
                s: summarize_rankings(r, ks, n_resamples=n_resamples, seed=seed)
                for s, r in rankings.items()
            },
        }
        write_metrics(folder, metrics)
        log.info("%s: %s", name, {s: m["metrics"] for s, m in metrics["splits"].items()})
        results[name] = metrics
    return results


def write_metrics(folder: Path, metrics: dict[str, object]) -> None:
    atomic_write(Path(folder) / "metrics.json", json.dumps(metrics, indent=1) + "\n")


def summarize_folder(
    folder: Path,
    *,
    ks: tuple[int, ...] = RANKING_KS,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> dict[str, object]:
    """metrics.json for a folder of rankings files written elsewhere (SASRec)."""
    from gti.evaluate.rankings import load_rankings

    folder = Path(folder)
    splits = {}
    source: dict[str, object] = {}
    for split in ("valid", "test"):
        path = folder / rankings_file(split)
        if path.is_file():
            r = load_rankings(path)
            source = r.source
            splits[split] = summarize_rankings(r, ks, n_resamples=n_resamples, seed=seed)
    if not splits:
        raise InputError(folder, "holds no valid.rankings.json or test.rankings.json")
    metrics = {"baseline": folder.name, "source": source, "splits": splits}
    write_metrics(folder, metrics)
    return metrics
