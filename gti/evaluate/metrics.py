"""Top-K metrics of next-item prediction with one held-out item per user.

Pure numpy functions of ranked item lists; no model involved. With a single
relevant item, Recall@K is the hit rate and the ideal DCG is 1, so
NDCG@K = 1 / log2(rank + 2) when the item sits at 0-based ``rank < K``, else 0.
"""

from __future__ import annotations

import numpy as np

DEFAULT_KS = (1, 5, 10, 20)


def target_ranks(ranked: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """0-based rank of each target in its row of ``ranked`` (N, M); M when absent. (N,) int."""
    ranked, targets = np.asarray(ranked), np.asarray(targets)
    hit = ranked == targets[:, None]  # (N, M)
    return np.where(hit.any(axis=1), hit.argmax(axis=1), ranked.shape[1])


def recall_at_k(ranked: np.ndarray, targets: np.ndarray, k: int) -> float:
    """Share of users whose target is among their first ``k`` items."""
    return float(np.mean(target_ranks(ranked, targets) < k))


def ndcg_at_k(ranked: np.ndarray, targets: np.ndarray, k: int) -> float:
    """Mean over users of 1 / log2(rank + 2) for a target ranked within ``k``, else 0."""
    ranks = target_ranks(ranked, targets)
    gains = np.where(ranks < k, 1.0 / np.log2(ranks + 2.0), 0.0)
    return float(np.mean(gains))


def topk_metrics(
    ranked: np.ndarray, targets: np.ndarray, ks: tuple[int, ...] = DEFAULT_KS
) -> dict[str, float]:
    """``{"recall@1": .., "ndcg@1": .., ...}`` for each K. Needs K <= the list length."""
    ranked = np.asarray(ranked)
    if len(ranked) == 0:
        raise ValueError("no users to evaluate")
    if max(ks) > ranked.shape[1]:
        raise ValueError(f"K={max(ks)} exceeds the {ranked.shape[1]} ranked items per user")
    out: dict[str, float] = {}
    for k in ks:
        out[f"recall@{k}"] = recall_at_k(ranked, targets, k)
        out[f"ndcg@{k}"] = ndcg_at_k(ranked, targets, k)
    return out
