"""Reading a matrix's rows for measuring: the new rows, the seeded reference sample of
original rows, and the precision they are held in."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from geodiag.analysis.options import AnalyzeOptions
from geodiag.errors import InputError
from geodiag.io.checkpoint import (
    MAX_PADDING_ROWS,
    Checkpoint,
    Matrix,
    check_original_rows,
    check_rows,
)


def reference_ids(
    ckpt: Checkpoint, n_new: int, opts: AnalyzeOptions, pool: np.ndarray | None = None
) -> np.ndarray:
    """The reference sample's ids: drawn from ``[0, base_vocab_size)``, or from ``pool``
    (sorted ids: the rows a sampled walk of the vocabulary reads) when given."""
    n_pool = ckpt.new.base_vocab_size if pool is None else len(pool)
    picked = reference_sample(n_pool, reference_size(n_new, opts), opts.seed)
    return picked if pool is None else pool[picked]


def reference_size(n_new: int, opts: AnalyzeOptions) -> int:
    """How many original rows the reference sample asks for: ``--reference-size`` when
    set, else as many as the new rows, capped at ``reference_cap`` (fewer when the
    vocabulary is smaller: :func:`reference_sample`)."""
    return opts.reference_size if opts.reference_size else min(n_new, opts.reference_cap)


def vocabulary_sample_size(n_new: int, opts: AnalyzeOptions) -> int:
    """The original rows a sampled vocabulary reads (a remote checkpoint's: the analysis
    decides when): the reference sample's size, within ``vocabulary_sample_blocks`` x
    ``vocabulary_block_min_rows`` and ``vocabulary_sample_rows`` (AnalyzeOptions). The
    reference rows are drawn from these, so the issue's floor (headers, small files, new
    rows and the reference sample) is what is read. Rounded up to whole blocks, so that
    the blocks hold the whole reference sample."""
    k = opts.vocabulary_sample_blocks
    size = max(reference_size(n_new, opts), k * opts.vocabulary_block_min_rows)
    return min(k * -(-size // k), opts.vocabulary_sample_rows)


def reference_sample(base_vocab_size: int, n: int, seed: int, cap: int | None = None) -> np.ndarray:
    """(m,) int64 sorted: the seeded sample of original-row ids the new rows are compared
    with, ``m = min(n, cap, base_vocab_size)`` distinct ids below ``base_vocab_size``
    (no cap when None). Also drawn by code measuring rows in memory (gti's grounding)."""
    size = min(n, base_vocab_size) if cap is None else min(n, cap, base_vocab_size)
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(base_vocab_size, size=size, replace=False)).astype(np.int64)


# Rows are held in float64 up to this many entries (128 MiB); above, as float32 wherever
# that holds the stored values exactly (the store decides: not F64, not a merged LoRA
# delta), half the memory: 100,000 new rows x 1,024 are 410 MB instead of 819 MB. The
# metrics sum in float64 either way (geodiag.metrics.geometry.as_matrix), so the figures
# differ only by the order of some float64 sums.
FLOAT64_ROWS_MAX_ELEMENTS = 16 * 2**20


def float32_at_scale(n_rows: int, matrix: Matrix) -> bool:
    return n_rows * matrix.dim > FLOAT64_ROWS_MAX_ELEMENTS


def reference_rows(
    ckpt: Checkpoint, matrix: Matrix, opts: AnalyzeOptions, n_new: int
) -> np.ndarray:
    """The usable rows of the reference sample, read from the store (the analysis takes
    them from its one walk of the vocabulary instead: :class:`SampleRows`)."""
    ids = reference_ids(ckpt, n_new, opts)
    return usable_reference(ckpt, matrix, ids, read_sample(ckpt, matrix, ids))


def read_sample(ckpt: Checkpoint, matrix: Matrix, ids: np.ndarray) -> np.ndarray:
    """The sampled original rows ``ids``, in the precision the sample is held in."""
    return ckpt.read_rows(matrix, ids, float32_at_scale(len(ids), matrix))


def usable_reference(
    ckpt: Checkpoint, matrix: Matrix, ids: np.ndarray, rows: np.ndarray
) -> np.ndarray:
    """The sampled original rows (ids (m,), rows (m, d)) the new ones are compared with."""
    finite = np.isfinite(rows).all(axis=1)
    # NaN/Inf rows are bad input (or dropped and counted under --allow-nonfinite); zero
    # rows are unused vocabulary slots, not "healthy tokens": left out of the reference.
    check_original_rows(ckpt, matrix, ids[~finite], ckpt.read.allow_nonfinite)
    ok = finite & np.any(rows != 0, axis=1)
    if not ok.any():
        raise InputError(
            ckpt.store.file_of(matrix.tensor),
            f"no usable original rows in '{matrix.tensor}' below id {ckpt.new.base_vocab_size} "
            "(all zero or non-finite): nothing to compare the new tokens with",
        )
    return rows if ok.all() else rows[ok]


@dataclass
class PaddingRows:
    """A matrix's unused padding rows (``Checkpoint.padding_ids``), read once: what the
    per-token findings and the integrity findings ask of them."""

    ids: np.ndarray  # (k,)
    norms: np.ndarray  # (k,) float64 ||row||; NaN or Inf for a non-finite row
    finite: np.ndarray  # (k,) bool
    live: np.ndarray  # (k,) bool: some entry is not zero


def read_padding(ckpt: Checkpoint, matrix: Matrix) -> PaddingRows | None:
    """None without padding rows, or past MAX_PADDING_ROWS of them (not read)."""
    ids = ckpt.padding_ids()
    if not len(ids) or len(ids) > MAX_PADDING_ROWS:
        return None
    rows = ckpt.read_rows(matrix, ids)  # (k, d) float64
    norms = np.sqrt(np.einsum("ij,ij->i", rows, rows))
    return PaddingRows(ids, norms, np.isfinite(rows).all(axis=1), np.any(rows != 0, axis=1))


@dataclass
class MatrixRows:
    """What measuring one matrix read, kept for whoever needs the rows again (integrity,
    the report's figures, the movement since a reference, drift): read once."""

    matrix: Matrix
    rows: np.ndarray | None  # (n_kept, d) the new rows (new_rows); None once let go
    keep: np.ndarray  # (n,) bool over ckpt.new.ids
    sample_ids: np.ndarray  # (m,) the reference sample's ids (empty without a vocabulary)
    sample_rows: np.ndarray | None  # (m, d) their rows as read, NaN and zero rows included
    padding: PaddingRows | None = None
    direction_rows: np.ndarray | None = None  # (k, d) for the vocabulary's directions

    @property
    def all_kept(self) -> bool:
        return self.rows is not None and bool(self.keep.all())


def new_rows(ckpt: Checkpoint, matrix: Matrix) -> tuple[np.ndarray, np.ndarray]:
    """(rows (n_kept, d), kept mask (n,)) of the new tokens in ``matrix``: float64, or
    float32 above FLOAT64_ROWS_MAX_ELEMENTS where that is exact. Non-finite rows fail, or
    are dropped under the checkpoint's ``--allow-nonfinite``."""
    ids = ckpt.new.ids
    rows = ckpt.read_rows(matrix, ids, float32_at_scale(len(ids), matrix))
    keep = check_rows(ckpt, matrix, rows, ckpt.read.allow_nonfinite)
    return (rows if keep.all() else rows[keep]), keep  # no second (n, d) copy


def selected_rows(rows: np.ndarray, sel: np.ndarray) -> np.ndarray:
    """rows[sel] for a boolean mask; a view, not a copy, when the selected rows are one
    run (a level's tokens usually are: 33,000 rows x 1,024 are 135 MB in float32)."""
    pos = np.flatnonzero(sel)
    if len(pos) and pos[-1] - pos[0] + 1 == len(pos):
        return rows[pos[0] : pos[-1] + 1]
    return rows[sel]
