"""Untrained rows: groups of indistinguishable rows, rows at a point, rows that barely moved.

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

Beside the rows that sit on one point: rows that are all zero (a zero init, or rows a
save never wrote), rows that barely moved since a reference checkpoint (``barely_moved``:
a random init no example reached keeps its random values), and rows whose norm lies far
outside the vocabulary's norm distribution (``norm_outliers``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from geodiag.metrics.geometry import ROW_BLOCK

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
    # Percentiles of the original rows' norms (NORM_PERCENTILES), None when no row is seen.
    norm_percentiles: dict[str, float] | None = None
    # (n_nonfinite,) ids of the rows left out as non-finite (for :func:`vocabulary_stats`,
    # positions in the stream): the gate names them.
    nonfinite_rows: np.ndarray | None = None


def vocabulary_stats(blocks: Iterable[np.ndarray]) -> VocabularyStats | None:
    """Mean, spread and largest norm of the rows of ``blocks`` ((b, d) arrays), exact:
    :class:`VocabularyAccumulator` fed every block, rows numbered from 0 in stream order."""
    acc, seen = VocabularyAccumulator(), 0
    for block in blocks:
        b = np.asarray(block)
        acc.add(np.arange(seen, seen + len(b), dtype=np.int64), b)
        seen += len(b)
    return acc.result()


class VocabularyAccumulator:
    """:func:`vocabulary_stats` one block at a time: ``add(ids, rows)`` for each block of
    the stream (a consumer of the single pass over the original rows,
    :mod:`geodiag.analysis.vocabulary`), then ``result()``.

    Rows are taken relative to a pivot (the first block's mean), so a large common mean
    does not cancel a small spread: sum ||x - p||^2 and sum (x - p) are accumulated in
    float64, then mean = p + s / n and n * spread^2 = sum ||x - p||^2 - n ||mean - p||^2
    (the pivot is within ~spread / sqrt(block) of the mean, so the subtraction loses
    nothing). Work stays in the blocks' dtype (float32 blocks: no float64 copy): each
    row's squares are summed at that precision (relative error ~d * 2^-24), and each
    block's column sums of x - p by one BLAS product (ones @ (x - p); a float64
    reduction of the block took 8x as long, the most of this pass on a Qwen-sized
    vocabulary): for a block of b rows an error of at most b * 2^-24 sum_i |x_ij - p_j|,
    so the mean stays within b * 2^-24 (6e-5 at 1,024 rows) of each dimension's spread,
    over 10 times below :data:`TOLERANCE` (1e-3 x the spread over all d dimensions).
    Non-finite rows are counted, their ids kept, and left out. ``result()`` is None when
    no finite row was seen.
    """

    def __init__(self) -> None:
        self.n, self.n_nonfinite = 0, 0
        self._pivot: np.ndarray | None = None
        self._total: np.ndarray | None = None  # (d,) float64: sum of (x - pivot)
        self._sq, self._max_sq = 0.0, 0.0
        self._norm_blocks: list[np.ndarray] = []
        self._bad_ids: list[np.ndarray] = []

    def add(self, ids: np.ndarray, block: np.ndarray) -> None:
        b = np.asarray(block)
        if not np.issubdtype(b.dtype, np.floating):
            b = b.astype(np.float64)
        norms_sq = np.einsum("ij,ij->i", b, b)  # (b,), in the block's dtype
        finite = np.isfinite(norms_sq)
        if not finite.all():  # a NaN/Inf entry (or a row past float32's range)
            self.n_nonfinite += int((~finite).sum())
            self._bad_ids.append(np.asarray(ids, dtype=np.int64)[~finite])
            b, norms_sq = b[finite], norms_sq[finite]
        if not len(b):
            return
        self._max_sq = max(self._max_sq, float(norms_sq.max()))
        self._norm_blocks.append(norms_sq)
        if self._pivot is None:
            self._pivot = b.mean(axis=0, dtype=np.float64).astype(b.dtype)  # (d,)
            self._total = np.zeros(b.shape[1])
        c = b - self._pivot  # (b, d), block dtype
        self._total += np.ones(len(c), c.dtype) @ c  # the block's column sums (docstring)
        self._sq += float(np.einsum("ij,ij->i", c, c).sum(dtype=np.float64))
        self.n += len(b)

    def result(self) -> VocabularyStats | None:
        if self._pivot is None:
            return None
        n = self.n
        offset = self._total / n  # (d,): mean - pivot
        m2 = max(self._sq - n * float(offset @ offset), 0.0)
        mean = self._pivot.astype(np.float64) + offset
        norms = np.sqrt(np.concatenate(self._norm_blocks).astype(np.float64))  # (n,)
        percentiles = {name: quantile(norms, q / 100) for q, name in NORM_PERCENTILES}
        bad = np.concatenate(self._bad_ids) if self._bad_ids else np.zeros(0, np.int64)
        return VocabularyStats(
            n,
            mean,
            float(np.sqrt(m2 / n)),
            float(np.sqrt(self._max_sq)),
            self.n_nonfinite,
            percentiles,
            bad,
        )


def quantile(x: np.ndarray, q: float) -> float:
    """np.quantile(x, q) (linear interpolation) of a non-empty 1-D array, by partition:
    np.quantile and np.median import numpy.ma (~9 ms of the gate's start-up)."""
    x = np.asarray(x, dtype=np.float64)
    h = (len(x) - 1) * q
    lo = int(np.floor(h))
    hi = min(lo + 1, len(x) - 1)
    part = np.partition(x, [lo, hi])
    return float(part[lo] + (h - lo) * (part[hi] - part[lo]))


# The vocabulary's norm distribution, as the findings use it: (percentile, name).
NORM_PERCENTILES = ((0.1, "p0.1"), (50.0, "p50"), (99.9, "p99.9"))
# A new row shorter than NORM_LOW x the vocabulary's 0.1th-percentile norm scores near zero
# against every hidden state (tied: never emitted); longer than NORM_HIGH x the 99.9th
# percentile, it wins softmaxes it has no business in (always emitted). Wide margins: on
# SmolLM2-135M the 0.1th..99.9th percentiles span 1.99..5.95, the demo's grounded rows
# sit at 0.9..1.2 (trained, emitted), its random and mean-init rows inside the range.
NORM_LOW = 0.25
NORM_HIGH = 4.0
NORM_RULE = (
    f"norm < {NORM_LOW:g} x the vocabulary's 0.1th-percentile norm (too small), "
    f"> {NORM_HIGH:g} x its 99.9th percentile (too large)"
)


def norm_outliers(
    norms: np.ndarray, percentiles: dict[str, float]
) -> tuple[np.ndarray, np.ndarray]:
    """(too small, too large): (n,) bool masks of ``norms`` against the vocabulary's norm
    percentiles (``VocabularyStats.norm_percentiles``). Zero rows are not "too small":
    they are their own finding (``zero_rows``)."""
    norms = np.asarray(norms, dtype=np.float64)
    small = (norms > 0) & (norms < NORM_LOW * percentiles["p0.1"])
    large = norms > NORM_HIGH * percentiles["p99.9"]
    return small, large


# Rows per block for the row-wise tests below: their (b, d) temporaries stay at a block,
# not a copy of 100,000 new rows (819 MB).
_BLOCK_ROWS = ROW_BLOCK


def _row_blocks(x: np.ndarray):
    for start in range(0, x.shape[0], _BLOCK_ROWS):
        yield x[start : start + _BLOCK_ROWS]


def zero_rows(x: np.ndarray) -> np.ndarray:
    """(n,) bool: rows of x (n, d) whose every entry is zero."""
    x = np.asarray(x)
    if x.shape[0] <= _BLOCK_ROWS:
        return ~np.any(x != 0, axis=1)
    return np.concatenate([~np.any(b != 0, axis=1) for b in _row_blocks(x)])


# A row any training example reached moves like the vocabulary's rows; one none reached moves
# only by weight decay and the softmax's push-down on every logit. On the demo's random arm
# (SmolLM2-135M, SFT from the init) the 246 new rows no example reached moved 1.8e-5..3e-5,
# ~1% of the median original row's 2.1e-3, the trained ones up to 1.3e-2.
MOVED_FRACTION = 0.02
MOVED_RULE = (
    f"moved less than {MOVED_FRACTION:g} x the median movement of the original rows since the "
    "reference (of the new rows, when the original rows did not move), or not at all"
)


@dataclass(frozen=True)
class Movement:
    """How far each new row moved since a reference checkpoint, and the barely-moved cut."""

    threshold: float  # embedding units; rows that moved less (or not at all) barely moved
    rule: str
    yardstick: str  # "original rows" | "new rows": whose median movement sets the threshold
    median_original: float | None  # median movement of the sampled original rows
    median_new: float
    reference: str | None = None  # what the rows moved from, as shown (a path, a tensor)


def barely_moved(
    movement: np.ndarray, original_movement: np.ndarray | None
) -> tuple[np.ndarray, Movement]:
    """(n,) bool: new rows that barely moved, from their movement ``||row - ref_row||`` (n,)
    and that of a sample of original rows (m,) (None: no vocabulary).

    The cut is MOVED_FRACTION x the median original movement (MOVED_RULE); when the original
    rows did not move (a frozen backbone: only the new rows trained) it is that fraction of
    the new rows' own median. A row that did not move at all is always flagged.
    """
    movement = np.asarray(movement, dtype=np.float64)
    med_new = quantile(movement, 0.5) if len(movement) else 0.0
    med_orig = (
        quantile(original_movement, 0.5)
        if original_movement is not None and len(original_movement)
        else None
    )
    if med_orig is not None and med_orig > 0:
        yardstick, scale = "original rows", med_orig
    else:
        yardstick, scale = "new rows", med_new
    threshold = MOVED_FRACTION * scale
    flagged = (movement == 0) | (movement < threshold)
    return flagged, Movement(float(threshold), MOVED_RULE, yardstick, med_orig, med_new)


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
    duplicates. Returns index arrays, each ascending, ordered by their first row. Float32
    rows (the new rows at scale) stay float32; projections and distances are float64.
    """
    x = np.asarray(x)
    if x.dtype != np.float32:
        x = np.asarray(x, dtype=np.float64)
    n, d = x.shape
    if n < 2:
        return []
    if tol <= 0:
        _, inverse, counts = np.unique(x, axis=0, return_inverse=True, return_counts=True)
        return _groups(inverse.reshape(-1), counts)
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((d, min(N_DIRECTIONS, d))))  # (d, k)
    if x.dtype == np.float64:
        proj = x @ q  # (n, k)
    else:  # a float32 x times float64 q would convert all of x at once
        proj = np.concatenate([b.astype(np.float64) @ q for b in _row_blocks(x)])
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
            # Pairs of rows not yet grouped: few, but all n - 1 on the first step when every
            # row sits at one point (a mean init), so their (m, d) differences go by blocks.
            linked = np.empty(len(a), dtype=bool)
            for at in range(0, len(a), _BLOCK_ROWS):
                # (b, d), in float64 (x[a] - x[b] in float32 would round)
                diff = (
                    x[a[at : at + _BLOCK_ROWS]].astype(np.float64, copy=False)
                    - x[b[at : at + _BLOCK_ROWS]]
                )
                linked[at : at + len(diff)] = np.sqrt(np.einsum("ij,ij->i", diff, diff)) <= tol
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


def distances(x: np.ndarray, point: np.ndarray) -> np.ndarray:
    """(n,) float64: ||x_i - point|| for the rows of x (n, d), a block of rows at a time."""
    point = np.asarray(point, dtype=np.float64)
    x = np.asarray(x)
    out = np.empty(x.shape[0])
    for start in range(0, x.shape[0], _BLOCK_ROWS):
        diff = x[start : start + _BLOCK_ROWS].astype(np.float64, copy=False) - point  # (b, d)
        out[start : start + len(diff)] = np.sqrt(np.einsum("ij,ij->i", diff, diff))
    return out


# New rows are compared with the rows past the tokenizer that no token uses (a padded
# vocabulary's never-trained rows, e.g. Qwen2.5's 271) by a two-sample Kolmogorov-Smirnov
# test on row norms. New tokens that landed on such rows without an init (the tokenizer
# grew, resize_token_embeddings had nothing to grow) are draws of the same distribution:
# the test keeps them (p >= PADDING_ALPHA) with probability 1 - PADDING_ALPHA. Rows that
# trained moved off it; and the comparison only means something when the padding rows
# themselves differ from the trained vocabulary (p < PADDING_ALPHA against its sample).
PADDING_ALPHA = 0.01
# Fewer rows on either side than this and the test has no power: the finding is not made.
MIN_PADDING_ROWS = 20
PADDING_RULE = (
    "row norms distributed as those of the unused rows past the tokenizer (two-sample KS "
    f"p >= {PADDING_ALPHA:g}), which differ from the vocabulary's (p < {PADDING_ALPHA:g}); "
    f"at least {MIN_PADDING_ROWS} rows on each side"
)


@dataclass(frozen=True)
class PaddingComparison:
    """The new rows' norms against the unused padding rows' and the vocabulary's."""

    n_padding: int
    p_new_vs_padding: float  # two-sample KS p-value on row norms
    p_padding_vs_vocabulary: float
    rule: str = PADDING_RULE

    @property
    def like_padding(self) -> bool:
        return (
            self.p_new_vs_padding >= PADDING_ALPHA and self.p_padding_vs_vocabulary < PADDING_ALPHA
        )


def compare_with_padding(
    new_norms: np.ndarray, padding_norms: np.ndarray, vocabulary_norms: np.ndarray
) -> PaddingComparison | None:
    """:class:`PaddingComparison` of three sets of row norms (1-D arrays); None when a set
    has fewer than MIN_PADDING_ROWS rows (no power either way)."""
    if min(len(new_norms), len(padding_norms), len(vocabulary_norms)) < MIN_PADDING_ROWS:
        return None
    from scipy.stats import ks_2samp  # scipy.stats costs ~0.3 s: only when padding exists

    p_new = float(ks_2samp(new_norms, padding_norms).pvalue)
    p_vocab = float(ks_2samp(padding_norms, vocabulary_norms).pvalue)
    return PaddingComparison(len(padding_norms), p_new, p_vocab)
