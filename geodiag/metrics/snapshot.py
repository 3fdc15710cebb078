"""A cheap structure snapshot of new rows, for every N training steps.

The figures the gate reads, by the gate's own definitions, without what makes a full
analysis slow (the uncentered spectrum, per-level spectra, the neighbour scan, 1,000
RSA permutations over every level):

- centered effective-rank ratio, from the eigenvalues of the smaller Gram matrix
  (one syrk and one symmetric eigensolve: ~0.1 s for 1,000 x 1,000 in float64);
- spread of the new rows relative to a reference sample of original rows;
- mean pairwise cosine, exact in O(n d);
- RSA against the codebook of the chosen levels on a seeded sample of tokens, with few
  permutations (a p-value floor of 1 / (1 + permutations));
- row by row (:func:`untrained`): how far each row moved since a first snapshot, which
  rows have not moved and which sit in a group of identical rows, by the gate's rule
  (:data:`geodiag.metrics.untrained.TOLERANCE` x the vocabulary's spread).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from geodiag.metrics.blas import blas_threads
from geodiag.metrics.geometry import (
    as_matrix,
    centered,
    mean_pairwise_cosine,
    singular_values_by_gram,
    spectrum_from_singular_values,
    spread,
)
from geodiag.metrics.rsa import rsa
from geodiag.metrics.untrained import identical_groups


@dataclass
class Snapshot:
    n_tokens: int
    effective_rank: float
    effective_rank_ratio: float  # centered effective rank / min(n, d), as in the gate
    spread_relative: float | None  # None when the reference has no spread
    mean_pairwise_cosine: float | None  # None for < 2 rows or a zero row
    rsa: dict[str, float | None] = field(default_factory=dict)
    rsa_p: dict[str, float | None] = field(default_factory=dict)
    rsa_n_items: dict[str, int] = field(default_factory=dict)
    rows: RowFindings | None = None  # row by row; None when not asked (no tolerance given)


@dataclass
class RowFindings:
    """Row-by-row findings of a snapshot: movement since the first one, untrained rows.

    Untrained: not moved since the first snapshot (distance <= ``tolerance``), or in a
    group of identical rows (within ``tolerance`` of another new row). At the first
    snapshot nothing has had a chance to move: only identical rows count.
    """

    tolerance: float  # embedding units
    movement: float | None  # RMS distance of the rows to their first state / scale
    n_unmoved: int | None  # None at the first snapshot
    unmoved_by_level: dict[str, float]  # fraction of each level's rows not moved
    n_identical: int  # rows in a group of identical rows
    n_identical_groups: int
    untrained: np.ndarray = field(repr=False)  # (n,) bool: unmoved or identical

    @property
    def n_untrained(self) -> int:
        return int(self.untrained.sum())


def untrained(
    x: np.ndarray,
    first: np.ndarray | None,
    scale: float,
    tolerance: float,
    level_of: tuple[np.ndarray, list[str]] | None = None,
    *,
    seed: int = 0,
    unmoved_untrained: bool = True,
) -> RowFindings:
    """Rows of x (n, d) that have not moved since ``first`` (n, d) (None: x is the first
    snapshot) or sit with others on one point. ``tolerance``: the distance under which two
    states of a row, or two rows, are one point; ``scale``: what movement is expressed in
    (the vocabulary's spread). level_of: ((n,) level index per row, level names).
    ``unmoved_untrained`` False: unmoved rows are counted, not flagged (a trained first state)."""
    x = as_matrix(x)
    groups = identical_groups(x, tolerance, seed=seed)
    identical = np.zeros(len(x), bool)
    for g in groups:
        identical[g] = True
    unmoved, movement, by_level = None, None, {}
    if first is not None:
        diff = x - np.asarray(first, dtype=np.float64)  # (n, d)
        dist = np.sqrt(np.einsum("ij,ij->i", diff, diff))  # (n,)
        unmoved = dist <= tolerance
        movement = float(np.sqrt(np.mean(dist**2)) / scale) if scale > 0 and len(x) else None
        if level_of is not None:
            index, names = level_of
            for li, name in enumerate(names):
                mine = index == li
                if mine.any():
                    by_level[name] = float(unmoved[mine].mean())
    flagged = identical | (unmoved if unmoved is not None and unmoved_untrained else False)
    return RowFindings(
        tolerance=float(tolerance),
        movement=movement,
        n_unmoved=None if unmoved is None else int(unmoved.sum()),
        unmoved_by_level=by_level,
        n_identical=int(identical.sum()),
        n_identical_groups=len(groups),
        untrained=flagged,
    )


def centered_effective_rank(x: np.ndarray) -> float:
    """Centered effective rank of x (n, d) from the Gram matrix's eigenvalues, on the
    caller's BLAS threads.

    Same definition as :func:`geodiag.metrics.geometry.summarize` (which takes the SVD
    below 1M elements): rows all equal give exactly 0.
    """
    c = centered(x)
    n, d = c.shape
    sv = singular_values_by_gram(c, widen_threads=False)
    return spectrum_from_singular_values(sv, n, d).effective_rank


def snapshot(
    x: np.ndarray,
    reference: np.ndarray,
    levels: dict[str, tuple[np.ndarray, np.ndarray]] | None = None,
    *,
    rsa_max_items: int = 256,
    n_permutations: int = 100,
    seed: int = 0,
    first: np.ndarray | None = None,
    scale: float | None = None,
    tolerance: float | None = None,
    level_of: tuple[np.ndarray, list[str]] | None = None,
    unmoved_untrained: bool = True,
) -> Snapshot:
    """Cheap figures of new rows x (n, d) against original rows ``reference`` (m, d).

    levels: {name: (token rows (k, d), codebook vectors (k, c))}, paired by row; RSA is
    computed for each on a seeded sample of at most ``rsa_max_items`` tokens.

    tolerance (with first, scale, level_of): the row-by-row findings of :func:`untrained`
    too, in ``rows``; None leaves them out. ``unmoved_untrained`` False: rows not moved
    since ``first`` are counted but not untrained (their first state was trained: a
    grounded init, as the gate judges a row that barely moved since one).

    Single-threaded BLAS: inside a training process torch's OpenMP threads spin beside
    OpenBLAS's, and 1,000 x 1,000 took 0.55-3.7 s multi-threaded against 0.26-0.29 s on
    one thread (bench/callback.py, a loaded 2-core machine).
    """
    with blas_threads(1):
        out = _snapshot(x, reference, levels, rsa_max_items, n_permutations, seed)
        if tolerance is not None:
            s = scale if scale is not None else 0.0
            out.rows = untrained(
                x, first, s, tolerance, level_of, seed=seed, unmoved_untrained=unmoved_untrained
            )
        return out


def _snapshot(x, reference, levels, rsa_max_items, n_permutations, seed) -> Snapshot:
    x = as_matrix(x)
    ref = as_matrix(reference, "reference")
    n, d = x.shape
    erank = centered_effective_rank(x)
    ref_spread = spread(ref)
    s = spread(x)
    out = Snapshot(
        n_tokens=n,
        effective_rank=erank,
        effective_rank_ratio=erank / min(n, d),
        spread_relative=s / ref_spread if ref_spread > 0 else None,
        mean_pairwise_cosine=mean_pairwise_cosine(x),
    )
    for name, (rows, book) in (levels or {}).items():
        r = rsa(
            rows,
            book,
            n_permutations=n_permutations,
            seed=seed,
            max_items=rsa_max_items,
            names=(f"the rows of level '{name}'", f"the codebook of level '{name}'"),
        )
        out.rsa[name], out.rsa_p[name], out.rsa_n_items[name] = r.spearman, r.p_value, r.n_items
    return out
