"""One walk of a matrix's original rows: each block read once and handed to every consumer.

The vocabulary's statistics and non-finite rows
(:class:`geodiag.metrics.untrained.VocabularyAccumulator`), the nearest original rows of
the new ones (:class:`geodiag.metrics.neighbors.NearestRows`) and the seeded reference
sample (:class:`SampleRows`) all look at the same rows ``[0, base_vocab_size)``; reading
them once per consumer would read (and hash, for the digest) the vocabulary that many
times. A consumer is anything with ``add(ids, rows)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

import numpy as np


class BlockConsumer(Protocol):
    def add(self, ids: np.ndarray, rows: np.ndarray) -> None:
        """One block: ids (m,) ascending, rows (m, d)."""


def feed(
    blocks: Iterable[tuple[np.ndarray, np.ndarray]], consumers: Sequence[BlockConsumer]
) -> int:
    """Hand every (ids, rows) block to every consumer, in order; returns the blocks read."""
    n_blocks = 0
    for ids, rows in blocks:
        for consumer in consumers:
            consumer.add(ids, rows)
        n_blocks += 1
    return n_blocks


class SampleRows:
    """The rows of ``ids`` (sorted, unique) picked out of the blocks as they pass, held as
    float32 when ``float32`` and float64 otherwise (the precision the reference sample is
    held in: :func:`geodiag.analysis.rows.float32_at_scale`).

    Taken only from float32 blocks: a store hands those out only when they hold the
    stored values exactly, so they equal what ``read_rows`` would return. A float64
    block (F64 weights, or rows a store computes, such as a merged LoRA delta, whose
    last bits may depend on how many rows are computed together) leaves ``rows`` None:
    the caller reads the sample itself.
    """

    def __init__(self, ids: np.ndarray, float32: bool) -> None:
        self.ids = np.asarray(ids, dtype=np.int64)
        self.rows: np.ndarray | None = None
        self._float32 = float32
        self._exact = True
        self._filled = 0

    def add(self, ids: np.ndarray, rows: np.ndarray) -> None:
        if not self._exact or not len(ids):
            return
        if rows.dtype != np.float32:
            self._exact, self.rows = False, None
            return
        if self.rows is None:
            dtype = np.float32 if self._float32 else np.float64
            self.rows = np.empty((len(self.ids), rows.shape[1]), dtype)
        lo, hi = np.searchsorted(self.ids, [ids[0], ids[-1] + 1])
        if hi > lo:  # the blocks are contiguous runs of ids
            self.rows[lo:hi] = rows[self.ids[lo:hi] - ids[0]]
            self._filled += hi - lo

    @property
    def complete(self) -> bool:
        return self._exact and self.rows is not None and self._filled == len(self.ids)
