"""Making semantic IDs unique: two items must never share a code tuple.

A registry of strategies, each a function with one keyword-only signature::

    fn(*, codes, last_residuals, last_codebook, generator) -> Resolved

- ``dedup-level`` (TIGER): append a level that numbers the items within each
  group sharing a tuple (0, 1, ...). Always appended, so every SID has L+1
  tokens; its size is the largest group. It has no learned codebook.
- ``sinkhorn`` (LC-Rec): keep L levels and move colliding items to other codes of
  the last level, chosen by a Sinkhorn-balanced assignment over their distances
  to the last codebook. Codes already held by an item with the same prefix are
  excluded, and one member of each group (the one nearest its code) keeps its
  code, so every round resolves at least one item per group and the loop ends.
  If some prefix (first L-1 codes) holds more items than the last level has
  codes, no re-assignment can separate them: the strategy then falls back to
  ``dedup-level`` and says so in ``Resolved.notes``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


def logsumexp(a: np.ndarray, axis: int) -> np.ndarray:
    """log(sum(exp(a))) along ``axis``, stable, and -inf (not NaN) for all -inf slices.
    (scipy has one; keeping this module numpy-only keeps the CLI import light.)"""
    peak = np.max(a, axis=axis, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    with np.errstate(divide="ignore"):
        return np.log(np.exp(a - peak).sum(axis=axis)) + peak.squeeze(axis)


@dataclass
class Resolved:
    codes: np.ndarray  # (n, L') int64, unique rows
    level_sizes: list[int]  # L' sizes
    strategy_used: str
    n_reassigned: int = 0  # items whose codes changed (sinkhorn)
    notes: list[str] = field(default_factory=list)


def groups_of(codes: np.ndarray) -> list[list[int]]:
    """Lists of item indices sharing a code tuple (only groups of 2+), in item order."""
    by_tuple: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for i, row in enumerate(map(tuple, codes.tolist())):
        by_tuple[row].append(i)
    return [g for g in by_tuple.values() if len(g) > 1]


def dedup_level(
    *,
    codes: np.ndarray,
    last_residuals: np.ndarray,
    last_codebook: np.ndarray,
    generator: np.random.Generator,
) -> Resolved:
    extra = np.zeros(len(codes), dtype=np.int64)
    for group in groups_of(codes):
        extra[group] = np.arange(len(group))
    sizes = [last_codebook.shape[0]] * codes.shape[1] + [int(extra.max()) + 1]
    return Resolved(np.column_stack([codes, extra]).astype(np.int64), sizes, "dedup-level")


def sinkhorn_assign(
    cost: np.ndarray, allowed: np.ndarray, epsilon: float = 0.003, n_iter: int = 100
) -> np.ndarray:
    """Balanced assignment of m rows to K columns; returns the chosen column per row.

    Distances are centred to [-1, 1] as in LC-Rec, then Sinkhorn-Knopp in the log
    domain (uniform row and column marginals) with disallowed pairs at zero mass.
    """
    m, k = cost.shape
    valid = cost[allowed]
    mid, amp = (valid.max() + valid.min()) / 2, (valid.max() - valid.min()) / 2 + 1e-5
    log_k = np.where(allowed, -(cost - mid) / amp / epsilon, -np.inf)  # (m, K)
    cols = allowed.any(0)
    log_r, log_c = -np.log(m), np.where(cols, -np.log(cols.sum()), -np.inf)
    u, v = np.zeros(m), np.zeros(k)
    # (-inf) - (-inf) on masked columns gives NaN warnings; the where discards them.
    with np.errstate(invalid="ignore"):
        for _ in range(n_iter):
            u = log_r - logsumexp(log_k + v[None, :], axis=1)
            v = np.where(cols, log_c - logsumexp(log_k + u[:, None], axis=0), -np.inf)
        plan = log_k + u[:, None] + v[None, :]
    return np.where(allowed, np.nan_to_num(plan, nan=-np.inf), -np.inf).argmax(1)


def sinkhorn(
    *,
    codes: np.ndarray,
    last_residuals: np.ndarray,
    last_codebook: np.ndarray,
    generator: np.random.Generator,
    max_rounds: int = 50,
) -> Resolved:
    codes = codes.copy()
    k = last_codebook.shape[0]

    def fall_back(why: str) -> Resolved:
        """``dedup-level`` on the codes as they stand, with a note saying why."""
        resolved = dedup_level(
            codes=codes,
            last_residuals=last_residuals,
            last_codebook=last_codebook,
            generator=generator,
        )
        resolved.notes.append(f"{why}; fell back to dedup-level")
        return resolved

    dist = (
        (last_residuals**2).sum(1, keepdims=True)
        - 2 * last_residuals @ last_codebook.T
        + (last_codebook**2).sum(1)[None, :]
    )  # (n, K)
    prefixes = [tuple(r) for r in codes[:, :-1].tolist()]
    crowded = defaultdict(int)
    for p in prefixes:
        crowded[p] += 1
    too_big = {p: c for p, c in crowded.items() if c > k}
    if too_big:
        p, c = max(too_big.items(), key=lambda kv: kv[1])
        return fall_back(
            f"sinkhorn cannot separate {c} items sharing prefix {list(p)} with {k} last-level codes "
            f"({len(too_big)} such prefixes)"
        )
    original = codes[:, -1].copy()
    for _ in range(max_rounds):
        groups = groups_of(codes)
        if not groups:
            break
        # The member nearest its current code stays; the others move.
        movers = sorted(
            i for g in groups for i in sorted(g, key=lambda i: (dist[i, codes[i, -1]], i))[1:]
        )
        moving = set(movers)
        allowed = np.ones((len(movers), k), dtype=bool)
        held = defaultdict(set)
        for i, p in enumerate(prefixes):
            if i not in moving:
                held[p].add(int(codes[i, -1]))
        for row, i in enumerate(movers):
            allowed[row, list(held[prefixes[i]])] = False
        codes[movers, -1] = sinkhorn_assign(dist[movers], allowed)
    if groups_of(codes):  # unreachable by the argument above; never ship duplicates
        return fall_back(f"sinkhorn left collisions after {max_rounds} rounds")
    n_moved = int((codes[:, -1] != original).sum())
    return Resolved(codes, [k] * codes.shape[1], "sinkhorn", n_reassigned=n_moved)


CollisionStrategy = Callable[..., Resolved]
COLLISION_STRATEGIES: dict[str, CollisionStrategy] = {
    "dedup-level": dedup_level,
    "sinkhorn": sinkhorn,
}
