"""The vocabulary's figures from a seeded sample of row blocks, and their standard errors.

Over HTTP every original row costs its bytes, so a remote checkpoint's vocabulary
figures (mean, spread, norms, non-finite rows) come from a sample (the analysis decides
when: ``geodiag.analysis.checkpoint``). The sample is blocks of consecutive rows, not
scattered rows: ranges closer than 256 KB are fetched as one request
(``geodiag.io.sources.byte_ranges``), so rows scattered across the vocabulary would read all of it.
One block sits at a seeded offset in each of K equal strata of ``[0, n_rows)``, so a
vocabulary whose rows drift with their id (tokens learned in frequency order) is covered
end to end.

The error: the blocks are treated as clusters, and the standard error of a figure is the
standard deviation of its K per-block values over sqrt(K), times the finite-population
correction sqrt(1 - n_read / n_rows). This ignores the gain from stratification, so it
errs on the large side.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def sample_blocks(n_rows: int, n_sample: int, n_blocks: int, seed: int) -> list[tuple[int, int]]:
    """[start, stop) spans, ascending: ``n_blocks`` blocks of ``n_sample // n_blocks`` rows,
    one at a seeded offset inside each of ``n_blocks`` equal strata of ``[0, n_rows)``; the
    whole range as one span when ``n_rows <= n_sample`` (nothing to gain from sampling)."""
    if n_rows <= n_sample:
        return [(0, n_rows)]
    k = min(n_blocks, n_sample)
    size = n_sample // k
    edges = (np.arange(k + 1) * n_rows) // k  # each stratum holds >= n_rows // k > size rows
    rng = np.random.default_rng(seed)
    spans = []
    for lo, hi in zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True):
        start = lo + int(rng.integers(0, hi - lo - size + 1))
        spans.append((start, start + size))
    return spans


def cluster_se(values: np.ndarray, n_read: int, n_rows: int) -> float:
    """Standard error of the mean of per-block ``values`` (K,): sd / sqrt(K) times the
    finite-population correction sqrt(1 - n_read / n_rows). 0.0 below two blocks."""
    values = np.asarray(values, dtype=np.float64)
    if len(values) < 2:
        return 0.0
    fpc = np.sqrt(max(1.0 - n_read / n_rows, 0.0))
    return float(values.std(ddof=1) / np.sqrt(len(values)) * fpc)


@dataclass(frozen=True)
class VocabularySample:
    """Which original rows the vocabulary figures come from, and the error that costs."""

    n_read: int  # original rows read (finite or not)
    n_rows: int  # original rows in all (base_vocab_size)
    blocks: list[tuple[int, int]]  # [start, stop) of each block read
    seed: int
    spread: float  # RMS distance of the sampled rows to their mean
    spread_se: float  # its standard error (module docstring)
    mean_norm: float  # mean row norm of the sampled rows
    mean_norm_se: float


class BlockFigures:
    """Per block of the sample, what its spread and mean norm need: ``add(ids, rows)`` for
    each piece of the walk (a consumer of :func:`geodiag.analysis.vocabulary.feed`; a
    piece lies inside one block), then :meth:`result`.

    Sums are taken relative to a pivot (the first piece's mean), as in
    :class:`geodiag.metrics.untrained.VocabularyAccumulator`, so a large common mean does
    not cancel a small spread. Non-finite rows are counted as read and left out.
    """

    def __init__(self, spans: list[tuple[int, int]]) -> None:
        self.spans = spans
        self._starts = np.array([lo for lo, _ in spans], dtype=np.int64)
        self._pivot: np.ndarray | None = None
        k = len(spans)
        self._n = np.zeros(k, np.int64)  # finite rows per block
        self._read = 0
        self._total: np.ndarray | None = None  # (k, d) sum of (x - pivot)
        self._sq = np.zeros(k)  # sum of ||x - pivot||^2
        self._norms = np.zeros(k)  # sum of ||x||

    def add(self, ids: np.ndarray, rows: np.ndarray) -> None:
        if not len(ids):
            return
        self._read += len(ids)
        x = np.asarray(rows, dtype=np.float64)  # (b, d): one piece, <= 1024 rows
        x = x[np.isfinite(x).all(axis=1)]
        if not len(x):
            return
        if self._pivot is None:
            self._pivot = x.mean(axis=0)
            self._total = np.zeros((len(self.spans), x.shape[1]))
        k = int(np.searchsorted(self._starts, ids[0], side="right")) - 1
        c = x - self._pivot  # (b, d)
        self._n[k] += len(x)
        self._total[k] += c.sum(axis=0)
        self._sq[k] += float(np.einsum("ij,ij->", c, c))
        self._norms[k] += float(np.sqrt(np.einsum("ij,ij->i", x, x)).sum())

    def result(self, n_rows: int, seed: int) -> VocabularySample | None:
        """None when no finite row was read."""
        if self._pivot is None:
            return None
        seen = self._n > 0
        n, total, sq = self._n[seen], self._total[seen], self._sq[seen]
        offset = total.sum(axis=0) / n.sum()  # (d,): the sample's mean - pivot
        # Each block's mean squared distance to the sample's mean (not its own mean: the
        # blocks' scatter around the sample mean is part of the spread).
        per_sq = (sq - 2.0 * (total @ offset) + n * float(offset @ offset)) / n  # (k,)
        per_sq = np.maximum(per_sq, 0.0)
        per_norm = self._norms[seen] / n
        return VocabularySample(
            n_read=self._read,
            n_rows=n_rows,
            blocks=[tuple(s) for s in self.spans],
            seed=seed,
            spread=float(np.sqrt((n * per_sq).sum() / n.sum())),
            spread_se=cluster_se(np.sqrt(per_sq), self._read, n_rows),
            mean_norm=float((n * per_norm).sum() / n.sum()),
            mean_norm_se=cluster_se(per_norm, self._read, n_rows),
        )
