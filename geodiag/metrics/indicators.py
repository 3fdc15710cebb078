"""Untrained without a before: an initializer's signature, and the under-trained indicators.

Two tests that need no reference checkpoint, only the rows and the vocabulary's:

**An initializer's draw.** Rows drawn i.i.d. from an isotropic Gaussian (an initializer's
N(0, sigma^2), or a "noise init": the vocabulary mean plus isotropic noise) put, around
their own mean, a share of their energy in any k fixed directions that is exactly
Beta(k (n - 1) / 2, (d - k) (n - 1) / 2) (mean k / d), whatever the center and sigma.
Trained rows inherit the vocabulary's anisotropy: on SmolLM2-135M and Gemma 3 270M the
top ISOTROPY_DIRECTIONS principal directions of the vocabulary hold 21-22% of its variance
against 16 / d = 2.5-2.8% for a draw. :func:`isotropy` tests the new rows' share against
that null (upper tail); p >= ISOTROPY_ALPHA keeps them as a possible draw. What kind of
draw (:func:`draw_kind`): at the model's initializer (their energy around 0 is sigma^2
chi^2_{n d} for the config's ``initializer_range``), or the vocabulary mean plus noise
(their mean is the vocabulary's within the noise, an F test, and the noise is under
NOISE_MAX x the vocabulary's spread); else an isotropic draw of some other scale (a
deliberate random init, e.g. gti's ``random``), which only a reference can tell from
trained rows.

**Under-trained indicators** (Land & Bartolo 2024, "Fishing for Magikarp",
cohere-ai/magikarp): rows pretraining never trained drift, under weight decay and the
softmax's push-down, toward one common direction. For an output (unembedding) row the
indicator is its cosine to the mean of the rows known unused, once each row's component
along the vocabulary's first principal direction (uncentered projection, as magikarp's
``embedding_distance_metrics``) is removed; for an untied input row, its norm (small:
never updated). Magikarp ranks candidates this way and then prompts the model; from the
files alone we cut at the reference rows' own distribution: a row as close to the unused
mean as UNUSED_QUANTILE of the unused rows themselves are (leave-one-out) is
under-trained, and the cut is applied only when at most MAX_VOCABULARY_ABOVE of a sample
of the other rows pass it (the rule's false-positive bound, measured on the model at
hand; else it says it cannot tell).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from geodiag.metrics.geometry import _SVD_SMALL_SIDE

# The isotropy test: directions, level, and the fewest rows it judges (two rows: 3.3% of
# SmolLM2's trained pairs pass as draws; four or more: none of 3,000 groups, both models).
ISOTROPY_DIRECTIONS = 16
ISOTROPY_ALPHA = 0.01
MIN_ISOTROPY_ROWS = 4
# transformers' PretrainedConfig default (normal(0, 0.02)) when config.json has none.
DEFAULT_INITIALIZER_RANGE = 0.02
# A "noise init" adds noise small against the vocabulary: under this x its spread.
NOISE_MAX = 0.5
DRAW_RULE = (
    f"the rows' energy around their mean in the vocabulary's top {ISOTROPY_DIRECTIONS} "
    f"principal directions is that of an isotropic draw (Beta null, p >= {ISOTROPY_ALPHA:g}; "
    f"at least {MIN_ISOTROPY_ROWS} rows), and either their norms are the model's "
    "initializer's (sigma^2 chi^2 around 0, sigma = config.json's initializer_range, else "
    f"{DEFAULT_INITIALIZER_RANGE:g}) or their mean is the vocabulary's with noise under "
    f"{NOISE_MAX:g} x its spread (a noise init)"
)

# The under-trained indicator's cut (module docstring).
UNUSED_QUANTILE = 0.1
# Magikarp's own candidate share (DEFAULT_THRESHOLD_PERCENTILE: the 2% of the vocabulary it
# verifies): a cut passing more of the other rows than that does not single rows out.
MAX_VOCABULARY_ABOVE = 0.02
MIN_UNUSED_ROWS = 10
UNDER_TRAINED_RULE = (
    "as close to the rows the files mark unused as the closest "
    f"{1 - UNUSED_QUANTILE:.0%} of those rows themselves (Land & Bartolo 2024: output rows' "
    "cosine to the unused rows' mean, first principal component removed; untied input rows' "
    f"norm); judged only when at most {MAX_VOCABULARY_ABOVE:.0%} of a sample of the other "
    f"rows pass the cut, with at least {MIN_UNUSED_ROWS} unused rows"
)


def principal_directions(rows: np.ndarray, k: int) -> np.ndarray:
    """(d, min(k, n, d)) the top-k principal directions of ``rows`` (n, d), centered, as
    orthonormal columns, in order of variance (the first is magikarp's first PC)."""
    x = np.asarray(rows, dtype=np.float64)
    c = x - x.mean(axis=0)
    n, d = c.shape
    if n <= d:
        if n > _SVD_SMALL_SIDE:
            v = _directions_by_row_gram(c, k)
            if v is not None:
                return v
        _, _, vt = np.linalg.svd(c, full_matrices=False)
        return vt[:k].T
    # More rows than columns: the (d, d) scatter's eigenvectors, a tenth of the SVD's time
    # (4,096 x 576: 0.1 s against 0.6 s); the same directions up to sign.
    _, vecs = np.linalg.eigh(c.T @ c)  # ascending eigenvalues
    return vecs[:, ::-1][:, :k]


def _directions_by_row_gram(c: np.ndarray, k: int) -> np.ndarray | None:
    """(d, min(k, n)) the top-k right singular vectors of ``c`` (n, d), n <= d, from the
    eigenvectors u of its (n, n) Gram matrix c c^T: v = c^T u / sqrt(lambda), for n above
    _SVD_SMALL_SIDE (below it the SVD is as cheap). The thin SVD computes all n vectors for
    the k wanted: on the gate's 512 fitted rows x 1,024 dims (DIRECTION_ROWS / 2) a Gram
    product and eigh take 48 ms against its 163 ms, 40 against 94 ms at SmolLM2's 576 dims
    (one BLAS thread, AMD EPYC, 2 cores, load 6). The same directions up to sign, to
    ~eps lambda_max / (the eigenvalue gap) (the Gram matrix's rounding), as the scatter's
    eigenvectors below are; their users are sign-blind (an energy share in their span, a
    component removed). None when one of the k eigenvalues is within the Gram matrix's rounding of 0 (rank
    below k): the SVD then completes the basis."""
    n = c.shape[0]
    w, u = np.linalg.eigh(c @ c.T)  # ascending
    w, u = w[::-1][:k], u[:, ::-1][:, :k]
    if not w[-1] > w[0] * n * np.finfo(np.float64).eps:
        return None
    v = c.T @ (u / np.sqrt(w))  # (d, k)
    return v / np.linalg.norm(v, axis=0)


@dataclass(frozen=True)
class Isotropy:
    """The share of the rows' energy around their mean in k fixed directions, against an
    isotropic draw's."""

    n_rows: int
    share: float
    expected: float  # k / d
    p_value: float  # P(share >= observed) under the isotropic null

    @property
    def like_draw(self) -> bool:
        return self.p_value >= ISOTROPY_ALPHA


def isotropy(rows: np.ndarray, directions: np.ndarray) -> Isotropy | None:
    """:class:`Isotropy` of ``rows`` (n, d) in ``directions`` (d, k), orthonormal; None
    with fewer than two rows or no energy (one point: the identical-rows finding's)."""
    x = np.asarray(rows, dtype=np.float64)
    n, d = x.shape
    k = directions.shape[1]
    if n < 2 or k >= d:
        return None
    c = x - x.mean(axis=0)  # (n, d)
    total = float(np.einsum("ij,ij->", c, c))
    if total <= 0:
        return None
    proj = c @ directions  # (n, k)
    share = float(np.einsum("ij,ij->", proj, proj)) / total
    p = beta_sf(share, k * (n - 1) / 2, (d - k) * (n - 1) / 2)
    return Isotropy(n, share, k / d, p)


def _rms_spread(x: np.ndarray) -> float:
    """RMS distance of the rows (n, d) to their mean."""
    c = x - x.mean(axis=0)
    return float(np.sqrt(np.einsum("ij,ij->", c, c) / len(x)))


def at_initializer_p(rows: np.ndarray, sigma: float) -> float:
    """Two-sided p of sum ||x_i||^2 / sigma^2 against chi^2 with n d degrees of freedom:
    are the rows (n, d) draws of N(0, sigma^2 I)?"""
    x = np.asarray(rows, dtype=np.float64)
    stat = float(np.einsum("ij,ij->", x, x)) / sigma**2
    lower = gamma_p(x.size / 2, stat / 2)  # chi^2 cdf
    return float(min(1.0, 2 * min(lower, 1.0 - lower)))


def around_mean_p(rows: np.ndarray, mean: np.ndarray) -> float:
    """p of the rows' (n, d) mean being ``mean`` (d,) under isotropic noise of unknown
    scale: n ||xbar - mean||^2 / d over the pooled variance, against F(d, (n - 1) d)."""
    x = np.asarray(rows, dtype=np.float64)
    n, d = x.shape
    xbar = x.mean(axis=0)
    c = x - xbar
    pooled = float(np.einsum("ij,ij->", c, c)) / ((n - 1) * d)
    off = xbar - np.asarray(mean, dtype=np.float64)
    if pooled <= 0:
        return 0.0
    stat = n * float(off @ off) / d / pooled
    d2 = (n - 1) * d
    return beta_cdf(d2 / (d2 + d * stat), d2 / 2, d / 2)  # F(d, d2) upper tail


def level_means_p(rows: np.ndarray, level_index: np.ndarray) -> float | None:
    """p of the levels' means being one (the rows (n, d), ``level_index`` (n,) their level)
    under isotropic noise of unknown scale: between-level over within-level energy per
    degree of freedom, against F(d (L - 1), d (n - L)); exact for an isotropic Gaussian
    draw around one center, which has no level structure. None with fewer than two levels,
    or no rows beyond one per level."""
    x = np.asarray(rows, dtype=np.float64)
    index = np.asarray(level_index)
    n, d = x.shape
    # Not np.unique: it imports numpy.ma (the gate's start-up)
    counts = np.bincount(index) if len(index) else np.zeros(0, np.int64)
    levels = [np.flatnonzero(index == li) for li in np.flatnonzero(counts)]
    n_levels = len(levels)
    if n_levels < 2 or n <= n_levels:
        return None
    grand = x.mean(axis=0)
    between = within = 0.0
    for at in levels:
        part = x[at]
        center = part.mean(axis=0)
        off = center - grand
        between += len(at) * float(off @ off)
        c = part - center
        within += float(np.einsum("ij,ij->", c, c))
    if within <= 0:
        return 0.0 if between > 0 else None
    d1, d2 = d * (n_levels - 1), d * (n - n_levels)
    stat = (between / d1) / (within / d2)
    return beta_cdf(d2 / (d2 + d1 * stat), d2 / 2, d1 / 2)  # F(d1, d2) upper tail


@dataclass(frozen=True)
class Draw:
    """What the isotropy test and the two centers say of a set of rows."""

    kind: str | None  # "initializer" | "noise" | "isotropic" | None (anisotropic: trained-like)
    isotropy: Isotropy
    sigma: float  # the initializer's std tested
    p_initializer: float
    p_mean: float
    noise: float  # RMS distance of the rows to their mean / the vocabulary's spread
    rule: str = DRAW_RULE


def draw_kind(
    rows: np.ndarray,
    directions: np.ndarray,
    vocabulary_mean: np.ndarray,
    vocabulary_spread: float,
    sigma: float,
) -> Draw | None:
    """:class:`Draw` of ``rows`` (n, d), or None with fewer than MIN_ISOTROPY_ROWS rows
    (the test cannot tell: the caller says so). ``directions``: the vocabulary's top
    principal directions (d, k); ``sigma``: the model's initializer's std."""
    x = np.asarray(rows, dtype=np.float64)
    if len(x) < MIN_ISOTROPY_ROWS:
        return None
    iso = isotropy(x, directions)
    if iso is None:
        return None
    noise = _rms_spread(x)  # its centered copy freed before the next test makes its own
    rel = noise / vocabulary_spread if vocabulary_spread > 0 else float("inf")
    p_init = at_initializer_p(x, sigma)
    p_mean = around_mean_p(x, vocabulary_mean)
    kind = None
    if iso.like_draw:
        if p_init >= ISOTROPY_ALPHA:
            kind = "initializer"
        elif p_mean >= ISOTROPY_ALPHA and rel < NOISE_MAX:
            kind = "noise"
        else:
            kind = "isotropic"
    return Draw(kind, iso, float(sigma), p_init, p_mean, rel)


# Null distributions without scipy (the gate's start-up: tests/geodiag/test_light_path.py):
# the regularized incomplete beta and gamma functions by their continued fractions and
# series (Numerical Recipes 6.2, 6.4), checked against scipy.special in the tests.
_EPS, _ITERATIONS = 1e-15, 10_000


def _beta_fraction(x: float, a: float, b: float) -> float:
    """The continued fraction of I_x(a, b), modified Lentz; converges for x < (a+1)/(a+b+2)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, _ITERATIONS):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            break
    return h


def beta_cdf(x: float, a: float, b: float) -> float:
    """The regularized incomplete beta function I_x(a, b): P(X <= x), X ~ Beta(a, b)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) * _beta_fraction(x, a, b) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(1 - x, b, a) / b


def beta_sf(x: float, a: float, b: float) -> float:
    """P(X >= x), X ~ Beta(a, b), without cancellation in the upper tail."""
    return beta_cdf(1 - x, b, a)


def gamma_p(a: float, x: float) -> float:
    """The regularized lower incomplete gamma function P(a, x)."""
    if x <= 0:
        return 0.0
    log_front = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1:  # the series
        term = total = 1.0 / a
        ap = a
        for _ in range(_ITERATIONS):
            ap += 1
            term *= x / ap
            total += term
            if abs(term) < abs(total) * _EPS:
                break
        return min(1.0, total * math.exp(log_front))
    tiny = 1e-300  # the continued fraction of Q(a, x), modified Lentz
    b = x + 1 - a
    c, d = 1.0 / tiny, 1.0 / b
    h = d
    for i in range(1, _ITERATIONS):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = b + an / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        if abs(d * c - 1.0) < _EPS:
            break
    return max(0.0, 1.0 - math.exp(log_front) * h)


def without_component(rows: np.ndarray, direction: np.ndarray) -> np.ndarray:
    """(n, d) float64 rows minus their (uncentered) projection on the unit ``direction``."""
    x = np.asarray(rows, dtype=np.float64)
    return x - np.outer(x @ direction, direction)


def cosines(rows: np.ndarray, v: np.ndarray) -> np.ndarray:
    """(n,) cosine of each row with ``v``; 0 for a zero row."""
    x = np.asarray(rows, dtype=np.float64)
    norms = np.sqrt(np.einsum("ij,ij->i", x, x)) * float(np.linalg.norm(v))
    dots = x @ v
    return np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)


@dataclass(frozen=True)
class UnusedMean:
    """The unused rows' mean with the first principal direction removed, and how close
    each unused row sits to the mean of the others (leave-one-out cosines)."""

    first_pc: np.ndarray  # (d,)
    mean: np.ndarray  # (d,) without the first PC
    own: np.ndarray  # (m,) leave-one-out cosines of the unused rows


def unused_mean(unused_rows: np.ndarray, first_pc: np.ndarray) -> UnusedMean:
    """:class:`UnusedMean` of the unused rows (m >= 2, d)."""
    y = without_component(unused_rows, first_pc)  # (m, d)
    m = len(y)
    total = y.sum(axis=0)
    others = (total[None, :] - y) / (m - 1)  # (m, d): each row's leave-one-out mean
    dots = np.einsum("ij,ij->i", y, others)
    norms = np.sqrt(np.einsum("ij,ij->i", y, y) * np.einsum("ij,ij->i", others, others))
    own = np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)
    return UnusedMean(np.asarray(first_pc, dtype=np.float64), total / m, own)


# Rows per block of :func:`unused_cosine`: its float64 temporaries (the projection and
# the rows without it) stay ~5 MB at Gemma's width, whatever the number of rows.
COSINE_BLOCK = 1024


def unused_cosine(rows: np.ndarray, ref: UnusedMean) -> np.ndarray:
    """(n,) magikarp's output-row indicator: cosine to the unused mean, first PC removed
    (higher: more like the unused rows). A block of rows at a time: each row's value is
    computed alone, so the blocks change no bit, and 6,143 new rows of Gemma no longer
    hold two (n, d) float64 temporaries (60 MB)."""
    out = np.empty(len(rows))
    for start in range(0, len(rows), COSINE_BLOCK):
        block = rows[start : start + COSINE_BLOCK]
        out[start : start + len(block)] = cosines(without_component(block, ref.first_pc), ref.mean)
    return out


@dataclass(frozen=True)
class Cut:
    """An indicator's cut from the unused rows' own scores (higher: more under-trained)."""

    value: float
    vocabulary_above: float  # fraction of the sampled other rows at or over the cut
    judged: bool  # the cut is applied (vocabulary_above <= MAX_VOCABULARY_ABOVE)
    unused_median: float
    vocabulary_median: float


def indicator_cut(unused_scores: np.ndarray, vocabulary_scores: np.ndarray) -> Cut:
    """The cut at the unused rows' UNUSED_QUANTILE score, and whether the sampled other
    rows (1-D scores, same direction) stay under it often enough for it to judge."""
    from geodiag.metrics.untrained import quantile

    cut = quantile(unused_scores, UNUSED_QUANTILE)
    above = float(np.mean(vocabulary_scores >= cut)) if len(vocabulary_scores) else 1.0
    return Cut(
        cut,
        above,
        above <= MAX_VOCABULARY_ABOVE,
        quantile(unused_scores, 0.5),
        quantile(vocabulary_scores, 0.5) if len(vocabulary_scores) else float("nan"),
    )


def rank_among(scores: np.ndarray, population: np.ndarray) -> np.ndarray:
    """(n,) for each score, the fraction of ``population`` scoring at least as high
    (0: above all of them; the rank is this x the population's size)."""
    pop = np.sort(np.asarray(population, dtype=np.float64))
    return 1.0 - np.searchsorted(pop, scores, side="left") / max(len(pop), 1)
