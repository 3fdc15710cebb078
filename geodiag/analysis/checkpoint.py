"""Measure one checkpoint (or a pair): read rows, call the metric functions, return dataclasses.

Compute first, render second: the CLI table, the JSON, the gate and the HTML
report all format what :func:`analyze` returns and compute nothing themselves.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from geodiag.analysis.findings import (  # noqa: F401  (TokenGroup, UntrainedRows: their old home)
    MIN_REFERENCE_ROWS,
    SHOWN_GROUPS,
    SHOWN_TOKENS,
    TokenFinding,
    TokenGroup,
    UntrainedRows,
    row_findings,
)
from geodiag.analysis.integrity import integrity
from geodiag.analysis.options import AnalyzeOptions
from geodiag.analysis.reports import (
    CheckpointReport,
    LevelMetrics,
    MatrixReport,
    Neighbor,
    TokenNeighbors,
)
from geodiag.analysis.rows import (
    new_rows,
    reference_ids,
    reference_rows,
    selected_rows,
)
from geodiag.io.checkpoint import (
    Checkpoint,
    Matrix,
    check_original_rows,
    open_checkpoint,
)
from geodiag.io.options import ReadOptions
from geodiag.metrics.blas import blas_threads
from geodiag.metrics.codebook import codebook_health
from geodiag.metrics.geometry import (
    level_cosine,
    row_norms,
    summarize,
)
from geodiag.metrics.neighbors import nearest_rows
from geodiag.metrics.rsa import rsa
from geodiag.metrics.untrained import vocabulary_stats, zero_rows
from geodiag.version import __version__


def _levels(
    ckpt: Checkpoint,
    rows: np.ndarray,
    keep: np.ndarray,
    reference: np.ndarray,
    opts: AnalyzeOptions,
):
    new = ckpt.new
    if new.level_index is None:
        return [], None
    index = new.level_index[keep]
    out = []
    for li, name in enumerate(new.level_names):
        sel = index == li
        if not sel.any():
            continue  # every row of this level was dropped as non-finite
        level_rows = selected_rows(rows, sel)
        book = ckpt.codebooks.get(name)
        skip = None
        if book is None:
            skip = ckpt.codebooks_note or f"no codebook for level '{name}'"
            result = None
        elif not keep.all():
            skip, result = "rows dropped as non-finite: token rows no longer pair with codes", None
        else:
            result = rsa(
                level_rows,
                book,
                n_permutations=opts.n_permutations,
                seed=opts.seed,
                max_items=opts.rsa_max_items,
                names=(
                    f"the embedding matrix of level '{name}'",
                    f"the codebook of level '{name}'",
                ),
            )
        out.append(
            LevelMetrics(name, int(sel.sum()), summarize(level_rows, reference), result, skip)
        )
    return out, level_cosine(rows, index, new.level_names)


NO_VOCABULARY = (
    "every row of the tensor is a new token (--all-rows-new): there is no original "
    "vocabulary to compare with"
)


def _neighbors(
    ckpt: Checkpoint, matrix: Matrix, rows: np.ndarray, ids: np.ndarray, opts: AnalyzeOptions
):
    if opts.neighbors_max <= 0 or opts.neighbors_k <= 0 or not ckpt.has_vocabulary:
        return [], False
    # A zero row has no direction, so no nearest rows: it is a finding of its own.
    pick = np.flatnonzero(~zero_rows(rows))
    sampled = len(pick) > opts.neighbors_max
    if sampled:
        rng = np.random.default_rng(opts.seed)
        pick = np.sort(rng.choice(pick, size=opts.neighbors_max, replace=False))
    if not len(pick):
        return [], False
    k = min(opts.neighbors_k, ckpt.new.base_vocab_size)
    near_ids, near_cos = nearest_rows(rows[pick], ckpt.iter_original(matrix), k=k)
    out = []
    for qi, row_ids, cos in zip(pick, near_ids, near_cos, strict=True):
        tid = int(ids[qi])
        out.append(
            TokenNeighbors(
                tid,
                ckpt.token(tid),
                [
                    Neighbor(int(i), ckpt.token(int(i)), float(c))
                    for i, c in zip(row_ids, cos, strict=True)
                ],
            )
        )
    return out, sampled


def analyze_matrix(ckpt: Checkpoint, matrix: Matrix, opts: AnalyzeOptions) -> MatrixReport:
    rows, keep = new_rows(ckpt, matrix)
    ids = ckpt.new.ids[keep]
    reference, undefined = None, NO_VOCABULARY
    vocab, sample = None, np.zeros(0, np.int64)
    bad_original, reference_norms = np.zeros(0, np.int64), None
    if ckpt.has_vocabulary:
        vocab = vocabulary_stats(block for _, block in ckpt.iter_original(matrix))
        if vocab is not None:
            bad_original = vocab.nonfinite_rows
            check_original_rows(ckpt, matrix, bad_original, ckpt.read.allow_nonfinite)
        sample = reference_ids(ckpt, len(rows), opts)
        reference = reference_rows(ckpt, matrix, opts, len(rows))
        reference_norms = row_norms(reference)
        if len(reference) < MIN_REFERENCE_ROWS or len(rows) < 2:
            undefined = (
                f"only {len(reference)} original row(s) below id {ckpt.new.base_vocab_size}: "
                "too few to compare the new rows' spread with"
                if len(reference) < MIN_REFERENCE_ROWS
                else "a single new row has no spread around its mean"
            )
            reference = None
    levels, lcos = _levels(ckpt, rows, keep, reference, opts)
    neighbors, sampled = _neighbors(ckpt, matrix, rows, ids, opts)
    new = summarize(rows, reference)
    norm_ratio = (  # the longest new row, from the summary's norms (not a second pass)
        new.row_norms.max / vocab.max_norm if vocab is not None and vocab.max_norm > 0 else None
    )
    return MatrixReport(
        role=matrix.role,
        tensor=matrix.tensor,
        dtype=matrix.dtype,
        n_rows=matrix.n_rows,
        dim=matrix.dim,
        n_new=len(rows),
        nonfinite_rows_dropped=int((~keep).sum()),
        new=new,
        reference=None if reference is None else summarize(reference),
        reference_size=0 if reference is None else len(reference),
        levels=levels,
        level_cosine=lcos,
        neighbors=neighbors,
        neighbors_sampled=sampled,
        reference_undefined_reason=None if reference is not None else undefined,
        untrained=row_findings(
            ckpt, matrix, rows, ids, vocab, sample, seed=opts.seed, reference_norms=reference_norms
        ),
        norm_ratio=norm_ratio,
        vocabulary_norms=None if vocab is None else vocab.norm_percentiles,
        nonfinite_original_rows_dropped=len(bad_original),
        nonfinite_original_ids=bad_original[:SHOWN_TOKENS].tolist(),
    )


def analyze(
    path: str | Path, read: ReadOptions | None = None, opts: AnalyzeOptions | None = None
) -> CheckpointReport:
    """All geometry metrics of one checkpoint's new tokens, per matrix and per level."""
    return analyze_checkpoint(
        open_checkpoint(path, read or ReadOptions()), opts or AnalyzeOptions()
    )


def _populations_note(ckpt: Checkpoint, m: MatrixReport) -> str | None:
    """Say so when the new rows look like two populations: trained ones beside untrained."""
    u = m.untrained
    if u is None or not u.two_populations:
        return None
    hint = ""
    if ckpt.new.source == "tokenizer":
        hint = (
            ": the base may ship added tokens of its own (Qwen2.5 and Qwen3 do); pass "
            "--base BASE to measure only the tokens absent from the base's tokenizer"
        )
    where = "output head" if m.role == "output" else "input embedding"
    return (
        f"{where}: the {m.n_new} new rows look like two populations, {u.n_trained} distinct "
        f"and {u.n_untrained} untrained{hint}"
    )


def analyze_checkpoint(ckpt: Checkpoint, opts: AnalyzeOptions) -> CheckpointReport:
    """:func:`analyze` on an opened checkpoint (a folder, or rows in memory)."""
    with blas_threads(1):
        matrices = [analyze_matrix(ckpt, m, opts) for m in ckpt.matrices]
    notes = list(ckpt.notes)
    if ckpt.codebooks_note:
        notes.append(ckpt.codebooks_note)
    m0 = matrices[0]
    if m0.neighbors_sampled:
        notes.append(
            f"nearest original tokens computed for a seeded sample of {opts.neighbors_max} new tokens"
        )
    if any(lv.rsa is not None and lv.rsa.sampled for m in matrices for lv in m.levels):
        notes.append(
            f"RSA computed on a seeded sample of {opts.rsa_max_items} tokens per level where larger"
        )
    if m0.reference is None:
        what = "spread ratio" if ckpt.has_vocabulary else "spread ratio and nearest original tokens"
        notes.append(
            f"{what} undefined: {m0.reference_undefined_reason}; the gate skips the "
            "spread-ratio check"
        )
    elif m0.reference_size < m0.n_new:
        notes.append(
            f"vocabulary reference: {m0.reference_size} original rows (fewer than the new rows)"
        )
    notes += [n for n in (_populations_note(ckpt, m) for m in matrices) if n]
    side = ckpt.sidecar
    health = None
    if side is not None and side.items and ckpt.new.source == "sidecar":
        health = codebook_health(
            side.items, [lv.name for lv in side.levels], [lv.size for lv in side.levels]
        )
    return CheckpointReport(
        geodiag_version=__version__,
        path=str(ckpt.path),
        store=ckpt.store.description,
        tied=ckpt.tied,
        n_new_tokens=len(ckpt.new.ids),
        new_token_source=ckpt.new.source,
        base_vocab_size=ckpt.new.base_vocab_size,
        level_names=list(ckpt.new.level_names),
        levels_source=ckpt.new.levels_source,
        provenance=dict(ckpt.sidecar.provenance) if ckpt.sidecar else {},
        matrices=matrices,
        digests=ckpt.digests(),
        notes=notes,
        adapter=ckpt.adapter,
        stack=ckpt.stack,
        codebook=health,
        integrity=integrity(ckpt, matrices),
        reference=None if ckpt.reference is None else str(ckpt.reference.path),
    )


def command_line() -> str:
    return " ".join(["geodiag", *sys.argv[1:]])
