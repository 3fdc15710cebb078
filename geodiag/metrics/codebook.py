"""Codebook health: how the items of a catalog use each level's codes (the sidecar's item map).

Geometry says whether the rows are trained; usage says whether they could be. A code no
item uses (dead) gets no training example, a code most items share carries little
information, and two items with one full code tuple cannot be told apart by the model.
Per level, with c_k the number of items whose code at that level is k and p_k = c_k / n:

- utilization: the fraction of codes used by at least one item;
- perplexity: exp(H), H = -sum p_k log p_k (nats): the number of equally used codes
  that would give the same entropy; normalized entropy H / log(n_codes), in [0, 1];
- max code share: max p_k.

Collisions: items whose whole code tuple another item also has.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SHOWN_DEAD = 32  # dead codes listed per level (the count is exact)
SHOWN_COLLISIONS = 5  # colliding tuples shown, with their items


@dataclass
class LevelUsage:
    name: str
    n_codes: int
    n_used: int
    utilization: float  # n_used / n_codes
    perplexity: float  # exp(entropy of the code-usage distribution), codes
    normalized_entropy: float | None  # entropy / log(n_codes); None for a 1-code level
    max_code_share: float  # largest fraction of items on one code
    n_dead: int
    dead_codes: list[int]  # the first SHOWN_DEAD, ascending


@dataclass
class Collision:
    codes: list[int]  # the shared tuple, one code per level
    items: list[str]  # the items that share it (first SHOWN_COLLISIONS)
    size: int


@dataclass
class CodebookHealth:
    n_items: int
    levels: list[LevelUsage]
    n_colliding_items: int  # items that share their full tuple with another item
    n_colliding_tuples: int
    max_items_per_tuple: int
    collisions: list[Collision]  # the largest SHOWN_COLLISIONS, ties by tuple


def code_counts(codes: np.ndarray, sizes: list[int]) -> list[np.ndarray]:
    """Per level, items per code: ``codes`` (n_items, n_levels) ints -> [(size_l,) ints]."""
    return [
        np.bincount(codes[:, li], minlength=size)[:size].astype(np.int64)
        for li, size in enumerate(sizes)
    ]


def level_usage(name: str, counts: np.ndarray) -> LevelUsage:
    """The usage figures of one level from its items-per-code counts (n_codes,)."""
    n_codes = len(counts)
    total = int(counts.sum())
    used = counts > 0
    if total:
        p = counts[used] / total
        entropy = float(-(p * np.log(p)).sum())
        share = float(counts.max() / total)
    else:
        entropy, share = 0.0, 0.0
    dead = np.flatnonzero(~used)
    return LevelUsage(
        name=name,
        n_codes=n_codes,
        n_used=int(used.sum()),
        utilization=float(used.sum() / n_codes) if n_codes else 0.0,
        perplexity=float(np.exp(entropy)),
        normalized_entropy=entropy / float(np.log(n_codes)) if n_codes > 1 else None,
        max_code_share=share,
        n_dead=int(len(dead)),
        dead_codes=[int(c) for c in dead[:SHOWN_DEAD]],
    )


def codebook_health(
    items: dict[str, list[int]], level_names: list[str], sizes: list[int]
) -> CodebookHealth:
    """Usage per level and SID collisions of ``items`` (item -> one code per level)."""
    names = list(items)
    codes = (
        np.array([items[k] for k in names], dtype=np.int64)
        if names
        else np.zeros((0, len(sizes)), np.int64)
    )  # (n_items, n_levels)
    levels = [
        level_usage(name, c) for name, c in zip(level_names, code_counts(codes, sizes), strict=True)
    ]
    collisions: list[Collision] = []
    n_items_colliding = n_tuples = max_per = 0
    if len(codes):
        tuples, inverse, counts = np.unique(codes, axis=0, return_inverse=True, return_counts=True)
        inverse = inverse.reshape(-1)
        shared = np.flatnonzero(counts > 1)
        n_tuples = int(len(shared))
        n_items_colliding = int(counts[shared].sum())
        max_per = int(counts.max())
        for t in sorted(shared.tolist(), key=lambda t: (-int(counts[t]), t))[:SHOWN_COLLISIONS]:
            members = [names[i] for i in np.flatnonzero(inverse == t)[:SHOWN_COLLISIONS]]
            collisions.append(Collision([int(c) for c in tuples[t]], members, int(counts[t])))
    return CodebookHealth(
        n_items=len(names),
        levels=levels,
        n_colliding_items=n_items_colliding,
        n_colliding_tuples=n_tuples,
        max_items_per_tuple=max_per,
        collisions=collisions,
    )
