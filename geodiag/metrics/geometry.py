"""Geometry of one row matrix (n tokens x d dims): spectrum, scale, cosine structure.

Every function is pure, computes in float64 and returns plain Python types, so the
results serialize to strict JSON. Undefined values are ``None`` with a reason, never NaN.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

# Above this many elements the spectra come from the smaller Gram matrix, not an SVD.
# Memory: a 100,000 x 1,024 SVD needs gigabytes of workspace, its Gram matrix 8 MB.
# Time: one Gram product of the centered rows gives both spectra (_spectra_via_gram)
# for n k^2 + 2 * (4/3) k^3 flops against two SVDs' 2 * (4 n d k - 4/3 k^3), k = min(n, d):
# the spectra of a Qwen-sized run's 2,000 x 1,024 new rows and reference sample took
# 0.40 s of CPU against 1.10 s for their four SVDs, single-threaded (bench/check_speed.py,
# AMD EPYC, 2 cores). Precision: an eigenvalue of the Gram
# matrix is exact to ~k eps lambda_max, so a singular value is resolved to
# sqrt(k eps) s_max (5e-7 s_max at k = 1,024); values below that read 0 (_sv_from_gram).
# The figures read s / sum(s) and s^2 / sum(s^2): a tail below the floor moves them by a
# share of at most k sqrt(k eps) (5e-4) of the total; measured on 2,000 x 1,024 (random,
# the mean, mean + 1e-9 noise, a line, low rank + mean: bench/check_speed.py) no rank
# figure moves more than 2e-10 relative (mean + 1e-9 noise, uncentered; the others
# <= 6e-12). Below 1,000,000 elements (SmolLM2's 1,000 x 576) the SVD costs little.
_SVD_MAX_ELEMENTS = 1_000_000
# With one side this small the SVD stays cheap and keeps full precision.
_SVD_SMALL_SIDE = 64
# The Gram product asks for every core only above this size: on a busy 2-core machine
# OpenBLAS's spin-waits cost more than threads give on smaller ones (blas.py).
_THREADS_MIN_ELEMENTS = 4_000_000


def as_matrix(
    x: np.ndarray, name: str = "x", *, min_rows: int = 1, keep_float32: bool = False
) -> np.ndarray:
    """``x`` as a finite 2-D float64 array (no copy when it already is one).

    ``keep_float32``: a float32 ``x`` stays float32, for the functions that take the new
    rows at scale (geodiag.analysis.rows.FLOAT64_ROWS_MAX_ELEMENTS) and sum in float64 a block
    at a time: float32 holds F32, F16 and BF16 weights exactly, in half the memory."""
    m = np.asarray(x)
    if not (keep_float32 and m.dtype == np.float32):
        m = np.asarray(m, dtype=np.float64)
    if m.ndim != 2:
        raise ValueError(f"{name} must be a 2-D (rows, dims) matrix, got shape {m.shape}")
    if m.shape[0] < min_rows:
        raise ValueError(f"{name} needs at least {min_rows} row(s), got shape {m.shape}")
    # min and max carry any NaN or Inf: the check needs no (n, d) mask (100 MB at 100,000 rows).
    if m.size and not (np.isfinite(m.min()) and np.isfinite(m.max())):
        raise ValueError(f"{name} holds NaN or Inf: drop or repair those rows before measuring")
    return m


def row_norms(x: np.ndarray) -> np.ndarray:
    """L2 norm of each row, (n,) float64, without an (n, d) temporary (rows of another
    dtype: converted to float64 a block at a time)."""
    x = np.asarray(x)
    if x.dtype == np.float64:
        return np.sqrt(np.einsum("ij,ij->i", x, x))
    out = np.empty(x.shape[0])
    for start, b in _blocks64(x):
        out[start : start + len(b)] = np.sqrt(np.einsum("ij,ij->i", b, b))
    return out


def _blocks64(x: np.ndarray):
    """(start, x[start : start + block] as float64) over the rows of x (n, d)."""
    for start in range(0, x.shape[0], _GRAM_BLOCK_ROWS):
        yield start, x[start : start + _GRAM_BLOCK_ROWS].astype(np.float64)


@dataclass(frozen=True)
class SpectrumStats:
    n_rows: int
    dim: int
    singular_values: list[float]  # descending, min(n, d) values
    effective_rank: float  # Roy & Vetterli 2007: exp(entropy of s_i / sum s), nats
    effective_rank_ratio: float  # effective_rank / min(n, d), in [0, 1]
    stable_rank: float  # sum s^2 / s_max^2
    participation_ratio: float  # (sum s^2)^2 / sum s^4
    top1_energy_share: float | None  # s_max^2 / sum s^2; None for a zero matrix
    undefined_reason: str | None


def _singular_values_svd(x: np.ndarray) -> np.ndarray:
    """Singular values by LAPACK SVD, descending. Exact but O(n d) workspace."""
    return np.linalg.svd(x, compute_uv=False)


def _gram(a: np.ndarray, widen_threads: bool = True) -> np.ndarray:
    """a @ a.T, (k, k), exactly symmetric. numpy hands a product of a matrix with its own
    transpose to BLAS syrk (half the flops of a general product, no copy of ``a``) and
    mirrors the triangle: as fast as scipy's dsyrk here (and equal to it, bit for bit, on
    one thread), without scipy's import. widen_threads=False keeps the caller's limit."""
    if a.size <= _THREADS_MIN_ELEMENTS or not widen_threads:
        return a @ a.T
    from geodiag.metrics.blas import blas_threads

    with blas_threads(None):  # the one product large enough to gain from threads
        return a @ a.T


def _sv_from_gram(gram: np.ndarray) -> np.ndarray:
    """Singular values from a Gram matrix's eigenvalues, descending.

    Eigenvalues below the Gram matrix's rounding floor (lambda_max * k * eps) are noise,
    not spectrum: they are set to 0 rather than turned into spurious small singular values.
    """
    eig = np.linalg.eigvalsh(gram)[::-1]
    eig[eig < eig[0] * len(eig) * np.finfo(np.float64).eps] = 0.0
    return np.sqrt(eig)


def _gram_scale(x: np.ndarray) -> float:
    """1, or the max |entry| when squaring the entries would underflow or overflow."""
    scale = max(float(x.max()), -float(x.min())) if x.size else 0.0  # np.abs would copy x
    return scale if scale and not 1e-100 < scale < 1e100 else 1.0


def singular_values_by_gram(x: np.ndarray, *, widen_threads: bool = True) -> np.ndarray:
    """Singular values of x (n, d), a 2-D float64 array, descending, from the eigenvalues
    of its smaller Gram matrix (the route above _SVD_MAX_ELEMENTS; its precision: the
    comment there). widen_threads=False keeps the caller's BLAS thread limit, where the
    product would otherwise ask for every core (the Trainer callback, beside torch's)."""
    n, d = x.shape
    if x.max() == 0.0 and x.min() == 0.0:
        return np.zeros(min(n, d))
    scale = _gram_scale(x)
    x = x / scale if scale != 1.0 else x
    return _sv_from_gram(_gram(x.T if d <= n else x, widen_threads)) * scale


def _use_gram(shape: tuple[int, int]) -> bool:
    n, d = shape
    return n * d > _SVD_MAX_ELEMENTS and min(n, d) > _SVD_SMALL_SIDE


# Rows per block wherever a loop over blocks of rows stands in for an (n, d) temporary
# (the centered Gram matrix, float64 views of float32 rows, per-row distances): 32 MB at
# 1,024 dims in float64. Each loop keeps a name of its own, for tests to shrink.
ROW_BLOCK = 4096
# A matrix of at most this many rows is one block, one Gram product.
_GRAM_BLOCK_ROWS = ROW_BLOCK


def _centered_blocks(x: np.ndarray, m: np.ndarray):
    """Blocks of c = x - m, (b, d) each: the centered rows without an (n, d) copy."""
    for start in range(0, x.shape[0], _GRAM_BLOCK_ROWS):
        yield x[start : start + _GRAM_BLOCK_ROWS] - m


def _spectra_via_gram(
    x: np.ndarray, m: np.ndarray, uncentered: bool = True
) -> tuple[SpectrumStats | None, SpectrumStats, float]:
    """(uncentered, centered, sum of squares of c) for x = c + m, from ONE Gram product of c
    (``uncentered`` False: None for the first, whose eigensolve is not taken).

    x^T x = c^T c + s m^T + m s^T + n m m^T with s = c^T 1: every term is added, none
    cancels, so the uncentered spectrum keeps full precision (deriving the centered one
    from x^T x would subtract and lose a tiny spread around a large mean). With d <= n,
    c^T c is summed over blocks of rows of c, so memory stays at one block, not a copy of x.
    """
    n, d = x.shape
    if d <= n:
        # One block (the gate's 2,000 rows): centered once for the scale and the product.
        one = [x - m] if n <= _GRAM_BLOCK_ROWS else None
        c_scale = max((_gram_scale(b) for b in one or _centered_blocks(x, m)), default=1.0)
        scale = max(c_scale, _gram_scale(m[None, :]))
        g_c, s, sq = np.zeros((d, d)), np.zeros(d), 0.0
        for b in one or _centered_blocks(x, m):
            sq += float(np.einsum("ij,ij->", b, b))
            b = b / scale if scale != 1.0 else b
            g_c += _gram(b.T)  # (d, d)
            s += b.sum(axis=0)  # ~0 by construction
        m = m / scale if scale != 1.0 else m
        if uncentered:
            g_x = g_c + np.outer(s, m) + np.outer(m, s) + n * np.outer(m, m)
    else:
        c = x - m  # (n, d), n < d: the (n, n) Gram matrix needs every row at once
        sq = float(np.einsum("ij,ij->", c, c))
        scale = max(_gram_scale(c), _gram_scale(m[None, :]))
        if scale != 1.0:
            c, m = c / scale, m / scale
        g_c = _gram(c)  # (n, n)
        if uncentered:
            cm = c @ m  # (n,)
            g_x = g_c + cm[:, None] + cm[None, :] + float(m @ m)
    sv_c = np.zeros(min(n, d)) if not g_c.any() else _sv_from_gram(g_c) * scale
    centered_ = spectrum_from_singular_values(sv_c, n, d)
    if not uncentered:
        return None, centered_, sq
    sv_x = np.zeros(min(n, d)) if not g_x.any() else _sv_from_gram(g_x) * scale
    return spectrum_from_singular_values(sv_x, n, d), centered_, sq


def singular_values(x: np.ndarray) -> np.ndarray:
    """All min(n, d) singular values of x (n, d), descending, float64."""
    return _singular_values(as_matrix(x))


def _singular_values(x: np.ndarray) -> np.ndarray:
    if not _use_gram(x.shape):
        return _singular_values_svd(x)
    return singular_values_by_gram(x)


def spectrum_from_singular_values(s: np.ndarray, n: int, d: int) -> SpectrumStats:
    """The rank figures of an (n, d) matrix from its singular values ``s`` (min(n, d))."""
    k = min(n, d)
    s = np.clip(np.asarray(s, dtype=np.float64), 0.0, None)
    total = float(s.sum())
    if total == 0.0:
        return SpectrumStats(
            n_rows=n,
            dim=d,
            singular_values=[0.0] * k,
            effective_rank=0.0,
            effective_rank_ratio=0.0,
            stable_rank=0.0,
            participation_ratio=0.0,
            top1_energy_share=None,
            undefined_reason="all entries are zero (e.g. centered rows that are all identical): "
            "the matrix has rank 0",
        )
    p = s[s > 0] / total
    entropy = float(-(p * np.log(p)).sum())
    # Energies relative to s_max keep s^4 from overflowing or underflowing.
    e = (s / s[0]) ** 2
    energy = float(e.sum())
    erank = float(np.exp(entropy))
    return SpectrumStats(
        n_rows=n,
        dim=d,
        singular_values=[float(v) for v in s],
        effective_rank=erank,
        effective_rank_ratio=erank / k,
        stable_rank=energy,
        participation_ratio=energy**2 / float((e**2).sum()),
        top1_energy_share=1.0 / energy,
        undefined_reason=None,
    )


def _spectrum(x: np.ndarray) -> SpectrumStats:
    n, d = x.shape
    if x.max() == 0.0 and x.min() == 0.0:  # exact zero matrix; np.any would allocate (n, d)
        return spectrum_from_singular_values(np.zeros(min(n, d)), n, d)
    return spectrum_from_singular_values(_singular_values(x), n, d)


def centered(x: np.ndarray) -> np.ndarray:
    """x - column mean, (n, d). Columns whose entries are all equal become exactly 0.

    Floating-point means of identical values can miss them by an ulp; without the exact
    case, rows set to one point would look like a tiny rank-1 cloud instead of rank 0.
    """
    return _centered(as_matrix(x))


def _centering_offset(x: np.ndarray) -> np.ndarray:
    """The column mean, with constant columns taken exactly (their first entry)."""
    constant = x.max(axis=0) == x.min(axis=0)  # (d,)
    return np.where(constant, x[0], x.mean(axis=0, dtype=np.float64))


def _centered(x: np.ndarray) -> np.ndarray:
    return x - _centering_offset(x)


@dataclass(frozen=True)
class NormStats:
    mean: float
    std: float  # population (ddof=0)
    min: float
    median: float
    max: float


def _median(r: np.ndarray) -> float:
    """np.median of a 1-D array, bit for bit (a partition, then the mean of the middle
    two), without np.median's import of numpy.ma (~9 ms of the gate's start-up)."""
    n = len(r)
    if n == 0 or np.isnan(r).any():
        return float(np.median(r))  # its warning and its NaN
    part = np.partition(r, [(n - 1) // 2, n // 2])
    return float((part[(n - 1) // 2] + part[n // 2]) / 2)


def _norm_stats(r: np.ndarray) -> NormStats:
    return NormStats(
        mean=float(r.mean()),
        std=float(r.std()),
        min=float(r.min()),
        median=_median(r),
        max=float(r.max()),
    )


def mean_pairwise_cosine(x: np.ndarray) -> float | None:
    """Mean of cos(x_i, x_j) over ordered pairs i != j of x (n, d), exact in O(n d).

    With unit rows u_i: sum_{i != j} u_i . u_j = ||sum_i u_i||^2 - n.
    None when n < 2 or a row has zero norm (its direction is undefined).
    """
    x = as_matrix(x, min_rows=0)
    return _mean_pairwise_cosine(x, row_norms(x))


def _mean_pairwise_cosine(x: np.ndarray, r: np.ndarray) -> float | None:
    n = x.shape[0]
    if n < 2 or np.any(r == 0):
        return None
    if x.dtype == np.float64:
        s = x.T @ (1.0 / r)  # (d,) sum of unit rows, without an (n, d) copy
    else:  # float32 rows: a product with float64 weights would convert all of x at once
        s = sum(b.T @ (1.0 / r[start : start + len(b)]) for start, b in _blocks64(x))
    value = (float(s @ s) - n) / (n * (n - 1))
    return float(np.clip(value, -1.0, 1.0))


def _spread_of_centered(c: np.ndarray) -> float:
    return float(np.sqrt(np.einsum("ij,ij->", c, c) / c.shape[0]))


def spread(x: np.ndarray) -> float:
    """RMS distance of the rows of x (n, d) to their centroid, in embedding units.

    The centered rows a block at a time: no (n, d) copy (a 20,000-row reference: 164 MB)."""
    x = as_matrix(x, keep_float32=True)
    m = _centering_offset(x)
    sq = sum(float(np.einsum("ij,ij->", b, b)) for b in _centered_blocks(x, m))
    return float(np.sqrt(sq / x.shape[0]))


@dataclass(frozen=True)
class GeometrySummary:
    n_tokens: int
    dim: int
    # None: not taken (summarize(uncentered=False): the gate's measure, which reads none
    # of its figures; geodiag.analysis.options.GATE_MEASURE)
    uncentered: SpectrumStats | None
    centered: SpectrumStats
    mean_pairwise_cosine: float | None
    row_norms: NormStats
    spread: float  # RMS distance to the centroid, embedding units
    spread_relative: float | None  # spread / reference spread; None without a usable reference


def summarize(
    x: np.ndarray, reference: np.ndarray | None = None, *, uncentered: bool = True
) -> GeometrySummary:
    """All single-matrix figures of x (n, d), with spread relative to ``reference`` (m, d);
    ``uncentered`` False leaves out the uncentered spectrum (None: one eigensolve fewer).

    Shape and scale together: mean + 1e-6 noise has a high centered effective rank, but
    a tiny spread_relative and a mean cosine of ~1. Float32 rows (the new rows at scale)
    are summed in float64 a block at a time; small ones are converted first.
    """
    x = as_matrix(x, keep_float32=True)
    if x.dtype != np.float64 and not _use_gram(x.shape):
        x = x.astype(np.float64)  # at most _SVD_MAX_ELEMENTS: the exact SVD needs float64
    n = x.shape[0]
    m = _centering_offset(x)  # (d,)
    if _use_gram(x.shape):  # centered rows a block at a time: no (n, d) copy
        plain, centered_, sq = _spectra_via_gram(x, m, uncentered)
        s = float(np.sqrt(sq / n))
    else:
        c = x - m  # (n, d) copy, shared by the centered spectrum and the spread
        s = _spread_of_centered(c)
        plain, centered_ = _spectrum(x) if uncentered else None, _spectrum(c)
    r = row_norms(x)
    summary = GeometrySummary(
        n_tokens=int(x.shape[0]),
        dim=int(x.shape[1]),
        uncentered=plain,
        centered=centered_,
        mean_pairwise_cosine=_mean_pairwise_cosine(x, r),
        row_norms=_norm_stats(r),
        spread=s,
        spread_relative=None,
    )
    return summary if reference is None else relative_to(summary, reference)


def relative_to(summary: GeometrySummary, reference: np.ndarray | None) -> GeometrySummary:
    """``summary`` (of x, from :func:`summarize` without a reference) with its spread
    relative to ``reference`` (m, d): what ``summarize(x, reference)`` returns, for a
    caller that took x's figures before the reference was read."""
    if reference is None:
        return summary
    ref = as_matrix(reference, "reference", keep_float32=True)
    if ref.shape[1] != summary.dim:
        shape = (summary.n_tokens, summary.dim)
        raise ValueError(f"reference has shape {ref.shape}, x has {shape}: dims must match")
    ref_spread = spread(ref)
    relative = summary.spread / ref_spread if ref_spread > 0 else None
    return replace(summary, spread_relative=relative)


def keeps_one_thread(shape: tuple[int, int]) -> bool:
    """Whether :func:`summarize` of an (n, d) matrix keeps the caller's BLAS thread limit
    (no Gram product large enough to ask for every core, _THREADS_MIN_ELEMENTS): it may
    then run in a thread beside other single-threaded work, and its results (and theirs)
    do not depend on it, as no thread count changes under them."""
    return shape[0] * shape[1] <= _THREADS_MIN_ELEMENTS
