"""Code-usage and collision statistics of a set of semantic IDs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class LevelStats:
    name: str
    size: int
    used: int  # distinct codes chosen by at least one item
    utilization: float  # used / size
    perplexity: float  # exp(entropy of code usage): the effective number of codes
    learned: bool  # False for the dedup level (no codebook)


@dataclass
class CollisionStats:
    n_items: int
    n_unique: int  # distinct code tuples
    collision_rate: float  # fraction of items whose tuple another item also has
    n_groups: int  # tuples shared by 2+ items
    max_group: int  # most items on one tuple (1 = collision-free)


def level_stats(codes: np.ndarray, size: int, name: str, learned: bool = True) -> LevelStats:
    """Usage of one level; ``codes`` is (n,) ints in [0, size)."""
    counts = np.bincount(codes, minlength=size)
    p = counts[counts > 0] / counts.sum()
    return LevelStats(
        name=name,
        size=size,
        used=int((counts > 0).sum()),
        utilization=float((counts > 0).sum() / size),
        perplexity=float(np.exp(-(p * np.log(p)).sum())),
        learned=learned,
    )


def collision_stats(codes: np.ndarray) -> CollisionStats:
    """Collisions of (n, L) code tuples."""
    _, inverse, counts = np.unique(codes, axis=0, return_inverse=True, return_counts=True)
    per_item = counts[inverse.reshape(-1)]
    return CollisionStats(
        n_items=len(codes),
        n_unique=len(counts),
        collision_rate=float((per_item > 1).mean()) if len(codes) else 0.0,
        n_groups=int((counts > 1).sum()),
        max_group=int(counts.max()) if len(counts) else 0,
    )
