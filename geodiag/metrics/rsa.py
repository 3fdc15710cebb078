"""Representational similarity analysis: do two paired row matrices share structure?

Compares the cosine dissimilarity matrices of a (n, d1) and b (n, d2) whose rows are
paired (token row i <-> codebook vector i): Spearman correlation over the upper
triangles, with a one-sided Mantel permutation p-value.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from geodiag.metrics.geometry import as_matrix, row_norms

# The significance level of an RSA's permutation p-value: at or above it, a level carries no
# trace of the codebook's structure (the gate warns, the report says so, quantization has no
# structure to keep there).
SIGNIFICANCE = 0.05
# A significant RSA below this is a faint trace, not the codebook's structure kept: Cohen
# (1988)'s "small" effect for a correlation (r = 0.1; RSA is a Spearman correlation).
SMALL_EFFECT = 0.1
# Dissimilarities whose spread is below this, relative to their size, are constant up to
# floating-point noise (e.g. rows that are all equidistant, like a regular simplex).
_CONSTANT_RTOL = 1e-10
# Unit rows that are parallel up to rounding differ by ~eps per component: their squared
# distance is ~eps^2 = 5e-32, not 0. Below this floor a dissimilarity is exactly 0, so
# parallel rows tie (a true angle of 1e-14 rad still gives 5e-29).
_PARALLEL_FLOOR = 1e-28
# Permuted statistics within this of the observed one count as ties (>=): a permutation
# that maps the structure onto itself sums the same terms in another order.
_TIE_TOL = 1e-12


def dissimilarity(x: np.ndarray) -> np.ndarray:
    """(n, n) cosine dissimilarity 1 - cos(x_i, x_j) of the rows of x (n, d), in [0, 2].

    Computed as ||u_i - u_j||^2 / 2 on unit rows u, which equals 1 - cos but keeps its
    precision for nearly parallel rows (1 - u_i . u_j cancels to rounding noise there).
    Rows parallel up to rounding get exactly 0, so they tie when ranked. Rows of zero
    norm have no direction: their row and column are NaN.
    """
    x = as_matrix(x, min_rows=0)
    n = x.shape[0]
    r = row_norms(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        u = x / r[:, None]  # (n, d)
    d = np.zeros((n, n))
    for i in range(n - 1):
        diff = u[i + 1 :] - u[i]  # (n - i - 1, d)
        d[i, i + 1 :] = (diff * diff).sum(axis=1) / 2
    d += d.T
    d = np.clip(d, 0.0, 2.0)  # NaN stays NaN
    d[d < _PARALLEL_FLOOR] = 0.0
    zero = r == 0
    d[zero, :] = np.nan
    d[:, zero] = np.nan
    return d


@dataclass(frozen=True)
class RSAResult:
    spearman: float | None  # in [-1, 1]
    p_value: float | None  # one-sided (structure shared), Mantel permutation test
    n_items: int  # items actually used (a seeded sample when n_total > max_items)
    n_total: int  # items given
    n_permutations: int  # permutations actually run (0 when undefined)
    sampled: bool
    undefined_reason: str | None


def _constant(t: np.ndarray) -> bool:
    return float(np.ptp(t)) <= _CONSTANT_RTOL * float(t.max())


def _undefined_reason(m: np.ndarray, t: np.ndarray, name: str) -> str | None:
    zero = np.flatnonzero(row_norms(m) == 0)
    if zero.size:
        return (
            f"{zero.size} row(s) of {name} have zero norm (first: item {int(zero[0])}): "
            "their cosine dissimilarity is undefined"
        )
    if np.all(m == m[:1]):
        return (
            f"all {len(m)} rows of {name} are identical (e.g. exact mean initialization): "
            "its dissimilarities are all 0 and carry no structure to correlate"
        )
    if _constant(t):
        return (
            f"the dissimilarities of {name} are constant up to rounding (rows all parallel, "
            "or all equidistant): they carry no structure to correlate"
        )
    return None


def _upper(x: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    return dissimilarity(x)[rows, cols]


def _average_ranks(t: np.ndarray) -> np.ndarray:
    """1-based ranks of t (m,), ties given their average rank (scipy's rankdata default).

    Written out so that the CI gate does not pay scipy.stats' second of import time.
    """
    order = np.argsort(t, kind="stable")
    ordered = t[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])  # first index of each run
    ends = np.r_[starts[1:], len(t)]  # one past the last
    run = np.repeat(np.arange(len(starts)), ends - starts)
    ranks = np.empty(len(t))
    ranks[order] = ((starts + ends + 1) / 2)[run]
    return ranks


def _sample(rng: np.random.Generator, n_total: int, max_items: int) -> np.ndarray | None:
    """The seeded subset of items rsa() uses above ``max_items``, ascending (None: all)."""
    if n_total <= max_items:
        return None
    return np.sort(rng.choice(n_total, size=max_items, replace=False))


def rsa_sample(n_total: int, seed: int, max_items: int) -> np.ndarray:
    """Positions (ascending) of the items rsa() measures among ``n_total``: all of them, or
    the seeded subset above ``max_items``."""
    keep = _sample(np.random.default_rng(seed), n_total, max_items)
    return np.arange(n_total) if keep is None else keep


def rsa(
    a: np.ndarray,
    b: np.ndarray,
    *,
    n_permutations: int,
    seed: int,
    max_items: int,
    names: tuple[str, str] = ("a (first matrix)", "b (second matrix)"),
    n_total: int | None = None,
) -> RSAResult:
    """Spearman RSA between the cosine dissimilarities of paired rows a (n, d1), b (n, d2).

    p-value: permute the items of b (rows and columns of its dissimilarity matrix
    together) with ``np.random.default_rng(seed)``; p = (1 + #{r_perm >= r_obs}) /
    (1 + n_permutations). Above ``max_items`` items a seeded subset (drawn first, from the
    same generator) is used. Undefined cases return None with a reason, never NaN; the
    reason calls the two matrices by ``names``. No defaults for the three settings: the
    callers pass them (``geodiag.analysis.options.AnalyzeOptions`` holds geodiag's).

    ``n_total``: a and b are already the rows of ``n_total`` items at the positions
    ``rsa_sample(n_total, seed, max_items)`` (read without holding all n_total rows); the
    generator draws that sample again so the permutations that follow are the same.
    """
    # Float32 rows (the new rows at scale) are sampled before they become float64.
    a = as_matrix(a, "a", min_rows=0, keep_float32=True)
    b = as_matrix(b, "b", min_rows=0, keep_float32=True)
    if a.shape[0] != b.shape[0]:
        raise ValueError(
            f"a {a.shape} and b {b.shape} must have the same number of rows (paired items)"
        )
    if n_permutations < 0:
        raise ValueError(f"n_permutations must be >= 0, got {n_permutations}")
    if max_items < 3:
        raise ValueError(f"max_items must be >= 3, got {max_items}")
    presampled = n_total is not None
    n_total = a.shape[0] if n_total is None else n_total
    rng = np.random.default_rng(seed)
    keep = _sample(rng, n_total, max_items)
    sampled = keep is not None
    if presampled and a.shape[0] != (n_total if keep is None else len(keep)):
        raise ValueError(f"{a.shape[0]} rows given for the sample of {n_total} items")
    if sampled and not presampled:
        a, b = a[keep], b[keep]
    a, b = a.astype(np.float64, copy=False), b.astype(np.float64, copy=False)
    n = a.shape[0]

    def undefined(reason: str) -> RSAResult:
        return RSAResult(None, None, n, n_total, 0, sampled, reason)

    if n < 3:
        return undefined(f"needs at least 3 items to correlate pairwise dissimilarities, got {n}")
    rows, cols = np.triu_indices(n, k=1)
    ta, tb = _upper(a, rows, cols), _upper(b, rows, cols)
    for m, t, name in ((a, ta, names[0]), (b, tb, names[1])):
        reason = _undefined_reason(m, t, name)
        if reason is not None:
            return undefined(reason)

    r_obs, p_value = _spearman_and_p(ta, tb, rows, cols, n, rng, n_permutations)
    return RSAResult(
        spearman=float(np.clip(r_obs, -1.0, 1.0)),
        p_value=p_value,
        n_items=n,
        n_total=n_total,
        n_permutations=n_permutations,
        sampled=sampled,
        undefined_reason=None,
    )


def _spearman_and_p(
    ta: np.ndarray,
    tb: np.ndarray,
    rows: np.ndarray,
    cols: np.ndarray,
    n: int,
    rng: np.random.Generator,
    n_permutations: int,
) -> tuple[float, float | None]:
    """Spearman r of the two triangles (n (n - 1) / 2,) at (rows, cols), and its
    permutation p-value (None for no permutations), drawing from ``rng``."""
    # Rank once; a permutation of items permutes the multiset of b's triangle values, so
    # their mean and norm are fixed and each permuted Pearson r is a single dot product.
    ra = _average_ranks(ta)
    rb = _average_ranks(tb)
    ra -= ra.mean()
    rb -= rb.mean()
    denom = float(np.sqrt(np.einsum("i,i->", ra, ra) * np.einsum("i,i->", rb, rb)))
    b_ranks = np.zeros((n, n))  # symmetric, so any permutation lands in its triangle
    b_ranks[rows, cols] = rb
    b_ranks[cols, rows] = rb
    b_flat = b_ranks.ravel()

    def statistic(perm: np.ndarray) -> float:
        # einsum, not a BLAS dot: BLAS threads cost milliseconds per call on a busy machine.
        flat = perm[rows] * n + perm[cols]  # (n (n - 1) / 2,) positions of the permuted triangle
        return float(np.einsum("i,i->", ra, b_flat[flat])) / denom

    r_obs = statistic(np.arange(n))
    p_value = None
    if n_permutations:
        hits = sum(statistic(rng.permutation(n)) >= r_obs - _TIE_TOL for _ in range(n_permutations))
        p_value = (1 + hits) / (1 + n_permutations)
    return r_obs, p_value
