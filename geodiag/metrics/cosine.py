"""Cosine structure of the new rows: mean cosine within and between groups of rows
(the SID levels, or a cosine map's blocks), and the full cosine matrix of a few rows.
Pure functions in float64, like :mod:`geodiag.metrics.geometry`, whose row helpers they use."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from geodiag.metrics.geometry import ROW_BLOCK, as_matrix, row_norms


@dataclass(frozen=True)
class LevelCosine:
    level_names: list[str]
    sizes: list[int]
    # (L, L) mean cosine between tokens of levels a and b; the diagonal averages distinct
    # pairs within a level (None for a level of fewer than 2 tokens).
    matrix: list[list[float | None]]
    within_mean: float | None  # all within-level distinct pairs, pooled
    between_mean: float | None  # all pairs from different levels, pooled
    undefined_reason: str | None = None


# Up to this many levels, one (L, n) indicator product gives every level's sum of unit
# rows; above (a cosine map's hundreds of blocks) the indicator would cost L n memory
# and L n d flops: 400 blocks of 100,000 rows are 320 MB and 4e10 flops.
_INDICATOR_MAX_LEVELS = 16
_SUM_CHUNK_ROWS = ROW_BLOCK


def _unit_row_sums(
    x: np.ndarray,
    r: np.ndarray,
    index: np.ndarray,
    n_levels: int,
    center: np.ndarray | None = None,
) -> np.ndarray:
    """(L, d): S_a = sum of (x_i - center) / r_i over the rows i of level a, in O(n d)
    time (``center`` None: x_i itself). The center is subtracted before dividing, a
    chunk at a time: rows near it have a tiny r_i, and x_i / r_i - center / r_i would
    cancel."""
    n, d = x.shape
    if n_levels <= _INDICATOR_MAX_LEVELS and center is None and x.dtype == np.float64:
        # (L, n) indicator weighted by 1 / ||x_i||: one product gives all S_a, no copy of x.
        weights = np.zeros((n_levels, n))
        weights[index, np.arange(n)] = 1.0 / r
        return weights @ x
    # Many levels (or float32 rows, which the product would convert at once): rows in
    # level order, a chunk at a time, each run of one level summed by reduceat, in float64.
    # Memory: one (chunk, d) block.
    sums = np.zeros((n_levels, d))
    order = np.argsort(index, kind="stable")
    for start in range(0, n, _SUM_CHUNK_ROWS):
        pick = order[start : start + _SUM_CHUNK_ROWS]
        block = x[pick] if center is None else x[pick] - center
        block = block / r[pick, None]  # (b, d)
        level = index[pick]
        runs = np.flatnonzero(np.r_[True, level[1:] != level[:-1]])
        sums[level[runs]] += np.add.reduceat(block, runs, axis=0)
    return sums


def _centered_norms(x: np.ndarray, center: np.ndarray) -> np.ndarray:
    """||x_i - center|| for each row, (n,), a chunk of rows at a time (no (n, d) copy)."""
    out = np.empty(x.shape[0])
    for start in range(0, x.shape[0], _SUM_CHUNK_ROWS):
        out[start : start + _SUM_CHUNK_ROWS] = row_norms(
            x[start : start + _SUM_CHUNK_ROWS] - center
        )
    return out


def level_cosine(
    x: np.ndarray,
    level_index: np.ndarray,
    level_names: list[str],
    *,
    center: np.ndarray | None = None,
) -> LevelCosine:
    """Mean cosine within and between levels, exact in O(n d).

    x (n, d); level_index (n,) ints in 0..L-1 with L = len(level_names). With S_a the sum
    of level a's unit rows: between = S_a . S_b / (n_a n_b), within =
    (||S_a||^2 - n_a) / (n_a (n_a - 1)). ``center`` (d,): the cosines of x_i - center
    (e.g. the rows' mean: the centered view), without an (n, d) copy of x - center.
    """
    x = as_matrix(x, min_rows=0, keep_float32=True)
    n = x.shape[0]
    names = [str(v) for v in level_names]
    n_levels = len(names)
    index = np.asarray(level_index)
    if index.shape != (n,):
        raise ValueError(
            f"level_index must have shape ({n},) to match x {x.shape}, got {index.shape}"
        )
    if n and (
        not np.issubdtype(index.dtype, np.integer) or index.min() < 0 or index.max() >= n_levels
    ):
        raise ValueError(f"level_index must hold ints in 0..{n_levels - 1} (one per level name)")
    sizes = (
        np.bincount(index.astype(np.int64), minlength=n_levels)[:n_levels]
        if n
        else np.zeros(n_levels, int)
    )
    r = row_norms(x) if center is None else _centered_norms(x, np.asarray(center, np.float64))
    empty = [[None] * n_levels for _ in range(n_levels)]
    if np.any(r == 0):
        reason = f"{int((r == 0).sum())} row(s) have zero norm: their cosine is undefined"
        return LevelCosine(names, [int(v) for v in sizes], empty, None, None, reason)

    sums = _unit_row_sums(x, r, index, n_levels, center)  # (L, d)
    g = sums @ sums.T  # (L, L)
    na = sizes.astype(np.float64)
    matrix: list[list[float | None]] = [[None] * n_levels for _ in range(n_levels)]
    for a in range(n_levels):
        for b in range(n_levels):
            if a == b and sizes[a] >= 2:
                v = (g[a, a] - na[a]) / (na[a] * (na[a] - 1))
            elif a != b and sizes[a] and sizes[b]:
                v = g[a, b] / (na[a] * na[b])
            else:
                continue
            matrix[a][b] = float(np.clip(v, -1.0, 1.0))

    within_pairs = float((na * (na - 1)).sum())
    within = (float(np.trace(g)) - float(na.sum())) / within_pairs if within_pairs else None
    between_pairs = float(na.sum() ** 2 - (na**2).sum())
    between_sum = float(g.sum() - np.trace(g))
    between = between_sum / between_pairs if between_pairs else None
    reason = None if n_levels else "no levels given"
    return LevelCosine(
        level_names=names,
        sizes=[int(v) for v in sizes],
        matrix=matrix,
        within_mean=None if within is None else float(np.clip(within, -1.0, 1.0)),
        between_mean=None if between is None else float(np.clip(between, -1.0, 1.0)),
        undefined_reason=reason,
    )


def cosine_matrix(x: np.ndarray) -> np.ndarray:
    """(n, n) cosine similarity of the rows of x (n, d), for small n.

    Rows of zero norm have an undefined direction: their row and column are NaN.
    """
    x = as_matrix(x, min_rows=0)
    r = row_norms(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        u = x / r[:, None]
    c = np.clip(u @ u.T, -1.0, 1.0)
    np.fill_diagonal(c, np.where(r > 0, 1.0, np.nan))
    return c
