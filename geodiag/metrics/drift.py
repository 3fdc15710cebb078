"""Drift of the same tokens between two checkpoints: per-token cosine and kept structure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from geodiag.metrics.geometry import ROW_BLOCK, as_matrix, row_norms
from geodiag.metrics.rsa import RSAResult, rsa, rsa_sample

_QUANTILES = {"p10": 0.10, "p25": 0.25, "p75": 0.75, "p90": 0.90}


@dataclass(frozen=True)
class DriftResult:
    n_tokens: int
    per_token_cosine: list[float | None]  # cos(a_i, b_i) in token order; None for a zero row
    cosine_mean: float | None  # summary statistics over the defined cosines
    cosine_median: float | None
    cosine_min: float | None
    cosine_quantiles: dict[str, float | None]  # "p10", "p25", "p75", "p90"
    relative_change: float | None  # ||b - a||_F / ||a||_F; None when a is all zero
    structure_rsa: RSAResult  # RSA of a's and b's dissimilarities: does the structure survive?
    undefined_reason: str | None = None  # why some cosines are None


def drift(
    a: np.ndarray,
    b: np.ndarray,
    *,
    n_permutations: int,
    seed: int,
    max_items: int,
) -> DriftResult:
    """How far each token row moved from a (n, d) to b (n, d), and whether the pairwise
    structure of a survives in b (RSA, see :func:`geodiag.metrics.rsa.rsa`)."""
    a = as_matrix(a, "a", keep_float32=True)
    b = as_matrix(b, "b", keep_float32=True)
    if a.shape != b.shape:
        raise ValueError(f"drift needs matrices of the same shape: a is {a.shape}, b is {b.shape}")
    dots, a_norm, diff_norm = _row_products(a, b)
    structure = rsa(
        a,
        b,
        n_permutations=n_permutations,
        seed=seed,
        max_items=max_items,
        names=RSA_NAMES,
    )
    return _result(row_norms(a), row_norms(b), dots, a_norm, diff_norm, structure)


RSA_NAMES = ("the first checkpoint", "the second checkpoint")


def _result(
    na: np.ndarray,
    nb: np.ndarray,
    dots: np.ndarray,
    a_norm: float,
    diff_norm: float,
    structure: RSAResult,
) -> DriftResult:
    """The drift figures from per-row norms and products (n,) and the two Frobenius norms."""
    ok = (na > 0) & (nb > 0)
    cos = np.full(len(na), np.nan)
    cos[ok] = np.clip(dots[ok] / (na[ok] * nb[ok]), -1.0, 1.0)
    per_token: list[float | None] = [float(c) if k else None for c, k in zip(cos, ok, strict=True)]
    reason = None
    if not ok.all():
        reason = (
            f"{int((~ok).sum())} token(s) have a zero row in a or b: their cosine is None "
            "and left out of the summary statistics"
        )
    defined = cos[ok]
    if defined.size:
        stats = (float(defined.mean()), float(np.median(defined)), float(defined.min()))
        quantiles = {k: float(np.quantile(defined, q)) for k, q in _QUANTILES.items()}
    else:
        stats = (None, None, None)
        quantiles = {k: None for k in _QUANTILES}
    return DriftResult(
        n_tokens=len(na),
        per_token_cosine=per_token,
        cosine_mean=stats[0],
        cosine_median=stats[1],
        cosine_min=stats[2],
        cosine_quantiles=quantiles,
        relative_change=diff_norm / a_norm if a_norm > 0 else None,
        structure_rsa=structure,
        undefined_reason=reason,
    )


_BLOCK_ROWS = ROW_BLOCK


def _row_products(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, float, float]:
    """(a_i . b_i per row (n,), ||a||_F, ||b - a||_F), in float64. Float32 rows (the new
    rows at scale) go a block at a time: no (n, d) float64 copy of either, nor of b - a."""
    if a.dtype == np.float64 and b.dtype == np.float64:
        dots = np.einsum("ij,ij->i", a, b)
        return dots, float(np.linalg.norm(a)), float(np.linalg.norm(b - a))
    stats = _RowStats(a.shape[0])
    for start in range(0, a.shape[0], _BLOCK_ROWS):
        stats.add(start, a[start : start + _BLOCK_ROWS], b[start : start + _BLOCK_ROWS])
    return stats.dots, float(np.sqrt(stats.a_sq.sum())), float(np.sqrt(stats.diff_sq.sum()))


class _RowStats:
    """Per-row float64 figures of a pair of matrices, filled a block of rows at a time."""

    def __init__(self, n: int) -> None:
        self.na, self.nb, self.dots = np.empty(n), np.empty(n), np.empty(n)
        self.a_sq, self.diff_sq = np.empty(n), np.empty(n)

    def add(self, start: int, a: np.ndarray, b: np.ndarray) -> None:
        a, b = a.astype(np.float64), b.astype(np.float64)
        at = slice(start, start + len(a))
        self.a_sq[at] = np.einsum("ij,ij->i", a, a)
        self.na[at] = np.sqrt(self.a_sq[at])
        self.nb[at] = np.sqrt(np.einsum("ij,ij->i", b, b))
        self.dots[at] = np.einsum("ij,ij->i", a, b)
        b -= a
        self.diff_sq[at] = np.einsum("ij,ij->i", b, b)


RowReader = Callable[[np.ndarray], np.ndarray]  # positions (k,) -> rows (k, d)


def streamed_drift(
    n: int,
    read_a: RowReader,
    read_b: RowReader,
    subsets: dict[str, np.ndarray],
    *,
    n_permutations: int,
    seed: int,
    max_items: int,
) -> tuple[DriftResult, dict[str, DriftResult]]:
    """:func:`drift` of all n rows and of each subset (name -> positions, ascending), with
    the rows read a block at a time rather than held: memory is a block and the RSA's
    sample, not two (n, d) matrices (100,000 x 1,024 in float32: 820 MB).

    The same figures as :func:`drift` on the rows in memory, up to the order of the
    Frobenius norms' float64 sums (per row, then over rows); the RSA reads the very rows
    :func:`drift`'s would sample, so its correlation and p-value are the same bits.
    """
    stats = _RowStats(n)
    for start in range(0, n, _BLOCK_ROWS):
        pos = np.arange(start, min(start + _BLOCK_ROWS, n))
        stats.add(start, read_a(pos), read_b(pos))

    def one(pos: np.ndarray) -> DriftResult:
        kw = dict(n_permutations=n_permutations, seed=seed, max_items=max_items)
        sample = pos[rsa_sample(len(pos), seed, max_items)]
        structure = rsa(read_a(sample), read_b(sample), n_total=len(pos), names=RSA_NAMES, **kw)
        return _result(
            stats.na[pos],
            stats.nb[pos],
            stats.dots[pos],
            float(np.sqrt(stats.a_sq[pos].sum())),
            float(np.sqrt(stats.diff_sq[pos].sum())),
            structure,
        )

    return one(np.arange(n)), {name: one(pos) for name, pos in subsets.items()}
