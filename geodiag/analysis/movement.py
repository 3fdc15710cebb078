"""How far each new row moved since a reference checkpoint, and by items per code.

The movement ``||row - reference row||`` of the new rows and of a sample of original rows
(whose median sets the barely-moved cut: :func:`geodiag.metrics.untrained.barely_moved`),
read a block at a time; and the new tokens bucketed by how many items use their code.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from geodiag.analysis.rows import MatrixRows
from geodiag.io.checkpoint import Checkpoint, Matrix
from geodiag.metrics.geometry import ROW_BLOCK
from geodiag.metrics.untrained import quantile


@dataclass
class UsageBucket:
    """New tokens whose code this many items use: how many stay untrained, how far they moved."""

    min_items: int
    max_items: int  # inclusive
    n_tokens: int
    n_untrained: int
    median_movement: float


def movement_since(
    ckpt: Checkpoint,
    matrix: Matrix,
    rows: np.ndarray,
    ids: np.ndarray,
    sample: np.ndarray,
    sample_rows: np.ndarray | None = None,
    theirs_held: MatrixRows | None = None,
) -> tuple[np.ndarray, np.ndarray | None] | None:
    """(||row - reference row|| per new row, the same for the sampled original rows ``sample``),
    None without a reference or when it lacks this matrix. ``sample_rows``: this matrix's
    rows at ``sample`` as already read; ``theirs_held``: the reference matrix's rows as
    measuring it read them (else both are read here)."""
    ref = ckpt.reference
    if ref is None:
        return None
    theirs = next((m for m in ref.matrices if m.role == matrix.role), None)
    if theirs is None or theirs.dim != matrix.dim:
        return None
    held_new = held_sample = None
    if theirs_held is not None and theirs_held.matrix.tensor == theirs.tensor:
        if theirs_held.all_kept and np.array_equal(ref.new.ids, ids):
            held_new = theirs_held.rows
        if np.array_equal(theirs_held.sample_ids, sample):
            held_sample = theirs_held.sample_rows
    moved = _distances(len(ids), lambda p: rows[p], _reader(ref, theirs, ids, held_new))
    original = None
    if len(sample):
        original = _distances(
            len(sample),
            _reader(ckpt, matrix, sample, sample_rows),
            _reader(ref, theirs, sample, held_sample),
        )
        original = original[np.isfinite(original)]
    return moved, original


def _reader(ckpt: Checkpoint, matrix: Matrix, ids: np.ndarray, held: np.ndarray | None):
    """The float64 rows at positions p of ``ids``: from ``held`` (rows aligned with ``ids``,
    as read before) when given, else read from ``ckpt``."""
    if held is not None:
        return lambda p: np.asarray(held[p], dtype=np.float64)
    return lambda p: ckpt.read_rows(matrix, ids[p])


# Rows per block of the movement: the reference's rows are read a block at a time, in
# order (the same bytes, so the same digest, as one read), not all 100,000 at once.
_MOVEMENT_BLOCK = ROW_BLOCK


def _distances(n: int, ours, theirs) -> np.ndarray:
    """(n,) float64 ||ours(p)_i - theirs(p)_i|| over positions p, a block at a time; each
    reader returns the rows at positions p (theirs: float64, so the difference is; ours
    may be float32, converted exactly by the subtraction)."""
    out = np.empty(n)
    for start in range(0, n, _MOVEMENT_BLOCK):
        pick = np.arange(start, min(start + _MOVEMENT_BLOCK, n))
        diff = ours(pick) - theirs(pick)  # (b, d)
        out[start : start + len(pick)] = np.sqrt(np.einsum("ij,ij->i", diff, diff))
    return out


def buckets(n_items: np.ndarray, untrained: np.ndarray, movement: np.ndarray) -> list:
    """Tokens by items per code: 0, 1, 2-3, 4-7, ... (codes only: n_items >= 0)."""
    out = []
    codes = n_items >= 0
    if not codes.any():
        return out
    lo = 0
    top = int(n_items[codes].max())
    while lo <= top:
        hi = 0 if lo == 0 else 2 * lo - 1
        sel = codes & (n_items >= lo) & (n_items <= hi)
        if sel.any():
            out.append(
                UsageBucket(
                    lo,
                    hi,
                    int(sel.sum()),
                    int(untrained[sel].sum()),
                    quantile(movement[sel], 0.5),
                )
            )
        lo = 1 if lo == 0 else 2 * lo
    return out
