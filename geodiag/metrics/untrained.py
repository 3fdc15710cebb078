"""Rows that never left their init: groups of indistinguishable rows, rows at a point.

A block-level figure (rank, spread, mean cosine) sees a collapse only when it fills the
block. When trained rows sit beside untrained ones (a Qwen-style base whose own added
tokens are trained, plus a block the user mean-resized) the trained rows carry the
block's figures and hide the untrained ones. These functions look at rows one by one.

The scale is the vocabulary's spread S (RMS distance of the original rows to their
mean). Rows that training has touched, pretrained rows and random inits lie a sizeable
fraction of S from one another; rows left at a mean init lie on one point (an exact
mean) or within ~4.5e-5 S of each other (transformers' ``mean_resizing`` draws from
N(mean, 1e-9 Sigma): two draws differ by sqrt(2e-9) S). ``TOLERANCE`` (1e-3 S) sits
over 20x above the second and far below the first.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

# Rows closer than TOLERANCE x the vocabulary's spread are one point (module docstring).
TOLERANCE = 1e-3
TOLERANCE_RULE = "1e-3 x the vocabulary's spread (RMS distance of its rows to their mean)"


@dataclass(frozen=True)
class VocabularyStats:
    """Exact figures of the original rows, from one streaming pass."""

    n_rows: int  # finite rows counted
    mean: np.ndarray  # (d,) float64
    spread: float  # RMS distance to the mean, embedding units
    max_norm: float
    n_nonfinite: int


def vocabulary_stats(blocks: Iterable[np.ndarray]) -> VocabularyStats | None:
    """Mean, spread and largest norm of the rows of ``blocks`` ((b, d) arrays), exact.

    Rows are taken relative to a pivot (the first block's mean), so a large common mean
    does not cancel a small spread: sum ||x - p||^2 and sum (x - p) are accumulated in
    float64, then mean = p + s / n and n * spread^2 = sum ||x - p||^2 - n ||mean - p||^2
    (the pivot is within ~spread / sqrt(block) of the mean, so the subtraction loses
    nothing). Work stays in the blocks' dtype (float32 blocks: no float64 copy), each
    row's squares summed at that precision (relative error ~d * 2^-24). Non-finite rows
    are counted and left out. None when no finite row is seen.
    """
    n, pivot, total, sq, max_sq, bad = 0, None, None, 0.0, 0.0, 0
    for block in blocks:
        b = np.asarray(block)
        if not np.issubdtype(b.dtype, np.floating):
            b = b.astype(np.float64)
        norms_sq = np.einsum("ij,ij->i", b, b)  # (b,), in the block's dtype
        finite = np.isfinite(norms_sq)
        if not finite.all():  # a NaN/Inf entry (or a row past float32's range)
            bad += int((~finite).sum())
            b, norms_sq = b[finite], norms_sq[finite]
        if not len(b):
            continue
        max_sq = max(max_sq, float(norms_sq.max()))
        if pivot is None:
            pivot = b.mean(axis=0, dtype=np.float64).astype(b.dtype)  # (d,)
            total = np.zeros(b.shape[1])
        c = b - pivot  # (b, d), block dtype
        total += c.sum(axis=0, dtype=np.float64)
        sq += float(np.einsum("ij,ij->i", c, c).sum(dtype=np.float64))
        n += len(b)
    if pivot is None:
        return None
    offset = total / n  # (d,): mean - pivot
    m2 = max(sq - n * float(offset @ offset), 0.0)
    mean = pivot.astype(np.float64) + offset
    return VocabularyStats(n, mean, float(np.sqrt(m2 / n)), float(np.sqrt(max_sq)), bad)


# Orthonormal directions the rows are projected on (distances only shrink), the first
# N_SORTS of which give the sort orders that propose candidate pairs (identical_groups).
N_DIRECTIONS = 16
N_SORTS = 4
# Each row is paired with this many rows after it in each sort order.
WINDOW = 2


def identical_groups(x: np.ndarray, tol: float, *, seed: int = 0) -> list[np.ndarray]:
    """Groups (>= 2 rows) of rows of x (n, d) that are numerically one point.

    Two rows are linked when their distance is at most ``tol``; a group is a connected
    set of links (single linkage). Candidate pairs: the rows sorted along ``N_SORTS``
    seeded random directions, each paired with the next ``WINDOW`` rows. Rows within
    ``tol`` of each other project within ``tol`` too, so a tight group's members sit side
    by side in every order, unless a foreign row projects into the group's own (tiny)
    width in all of them. A pair is kept when its distance in an orthonormal projection
    (N_DIRECTIONS dims; a necessary condition, as projections only shrink distances) and
    then in full is at most ``tol``. O(n d) time, no (n, n) matrix. ``tol`` 0: exact
    duplicates. Returns index arrays, each ascending, ordered by their first row.
    """
    x = np.asarray(x, dtype=np.float64)
    n, d = x.shape
    if n < 2:
        return []
    if tol <= 0:
        _, inverse, counts = np.unique(x, axis=0, return_inverse=True, return_counts=True)
        return _groups(inverse.reshape(-1), counts)
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((d, min(N_DIRECTIONS, d))))  # (d, k)
    proj = x @ q  # (n, k)
    parent = np.arange(n)
    for s in range(min(N_SORTS, q.shape[1])):
        o = np.argsort(proj[:, s], kind="stable")
        for step in range(1, min(WINDOW, n - 1) + 1):
            a, b = o[:-step], o[step:]
            diff = proj[a] - proj[b]  # (n - step, k)
            close = np.einsum("ij,ij->i", diff, diff) <= tol * tol
            roots = _roots(parent)
            a, b = a[close], b[close]
            a, b = a[roots[a] != roots[b]], b[roots[a] != roots[b]]  # not yet linked
            diff = x[a] - x[b]  # (m, d), m small: pairs of rows not yet grouped
            linked = np.sqrt(np.einsum("ij,ij->i", diff, diff)) <= tol
            _union(parent, a[linked], b[linked])
    roots = _roots(parent)
    _, inverse, counts = np.unique(roots, return_inverse=True, return_counts=True)
    return _groups(inverse, counts)


def _groups(label: np.ndarray, counts: np.ndarray) -> list[np.ndarray]:
    """Rows sharing a label (n,), groups of two or more, ordered by their first row."""
    order = np.argsort(label, kind="stable")  # rows by label, ascending within each
    groups = np.split(order, np.cumsum(counts)[:-1])
    return sorted((g for g in groups if len(g) >= 2), key=lambda g: int(g[0]))


def _union(parent: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """Link a[i] with b[i] for every i (union by smaller root, path halving)."""

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in zip(a.tolist(), b.tolist(), strict=True):
        ri, rj = root(i), root(j)
        if ri != rj:
            parent[max(ri, rj)] = min(ri, rj)


def _roots(parent: np.ndarray) -> np.ndarray:
    """Every node's root, by pointer jumping (vectorized)."""
    while True:
        nxt = parent[parent]
        if np.array_equal(nxt, parent):
            return parent
        parent = nxt


def near_point(x: np.ndarray, point: np.ndarray, tol: float) -> np.ndarray:
    """(n,) bool: rows of x (n, d) within ``tol`` of ``point`` (d,)."""
    diff = np.asarray(x, dtype=np.float64) - np.asarray(point, dtype=np.float64)
    return np.sqrt(np.einsum("ij,ij->i", diff, diff)) <= tol
