"""Measure one checkpoint (or a pair): read rows, call the metric functions, return dataclasses.

Compute first, render second: the CLI table, the JSON, the gate and the HTML
report all format what :func:`measure_checkpoint` returns and compute nothing themselves.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from geodiag.analysis.audit import audit
from geodiag.analysis.fed import fed_rows
from geodiag.analysis.findings import (
    MIN_REFERENCE_ROWS,
    SHOWN_TOKENS,
    row_findings,
)
from geodiag.analysis.indicators import DIRECTION_ROWS, draw_finding, structure_evidence
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
    MatrixRows,
    float32_at_scale,
    new_rows,
    read_padding,
    read_sample,
    reference_ids,
    reference_sample,
    selected_rows,
    usable_reference,
    vocabulary_sample_size,
)
from geodiag.analysis.vocabulary import SampleRows, feed
from geodiag.io.checkpoint import (
    Checkpoint,
    Matrix,
    check_original_rows,
    open_checkpoint,
)
from geodiag.io.sources.options import ReadOptions
from geodiag.io.usage import TokenUsage, token_usage
from geodiag.metrics.blas import blas_threads
from geodiag.metrics.codebook import codebook_health
from geodiag.metrics.cosine import level_cosine
from geodiag.metrics.geometry import (
    GeometrySummary,
    keeps_one_thread,
    relative_to,
    row_norms,
    summarize,
)
from geodiag.metrics.neighbors import NearestRows
from geodiag.metrics.rsa import rsa
from geodiag.metrics.untrained import (
    TOLERANCE_RULE,
    VocabularyAccumulator,
    VocabularyStats,
    zero_rows,
)
from geodiag.metrics.vocabulary_sample import BlockFigures, VocabularySample, sample_blocks
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


def _neighbor_queries(
    ckpt: Checkpoint, rows: np.ndarray, opts: AnalyzeOptions
) -> tuple[np.ndarray, bool] | None:
    """(positions of the new rows whose nearest originals are listed, sampled?), or None."""
    if opts.neighbors_max <= 0 or opts.neighbors_k <= 0 or not ckpt.has_vocabulary:
        return None
    # A zero row has no direction, so no nearest rows: it is a finding of its own.
    pick = np.flatnonzero(~zero_rows(rows))
    sampled = len(pick) > opts.neighbors_max
    if sampled:
        rng = np.random.default_rng(opts.seed)
        pick = np.sort(rng.choice(pick, size=opts.neighbors_max, replace=False))
    if not len(pick):
        return None
    return pick, sampled


def _neighbor_list(
    ckpt: Checkpoint, ids: np.ndarray, pick: np.ndarray, near: tuple[np.ndarray, np.ndarray]
) -> list[TokenNeighbors]:
    out = []
    for qi, row_ids, cos in zip(pick, *near, strict=True):
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
    return out


@dataclass
class _Vocabulary:
    """What the one walk of a matrix's original rows found."""

    stats: VocabularyStats | None
    sample_ids: np.ndarray  # (m,) the reference sample
    sample_rows: np.ndarray  # (m, d) as read
    reference: np.ndarray  # its usable rows
    # the nearest original rows, named when asked (the names are read from the tokenizer:
    # asked once the draw test runs beside, they take no time of their own)
    neighbors: Callable[[], list[TokenNeighbors]]
    neighbors_sampled: bool
    vocabulary_sample: VocabularySample | None  # None: every original row was read
    # (k, d) a seeded sample of original rows for the vocabulary's principal directions
    # (the initializer's-draw test: geodiag.analysis.indicators.DIRECTION_ROWS)
    direction_rows: np.ndarray | None = None


def vocabulary_spans(
    ckpt: Checkpoint, opts: AnalyzeOptions, n_new: int
) -> list[tuple[int, int]] | None:
    """The blocks of original rows the walk reads: None (every row) for a local
    checkpoint, under --full-vocabulary, or when the vocabulary is no larger than
    ``vocabulary_sample_rows``; else a seeded sample of blocks of
    :func:`~geodiag.analysis.rows.vocabulary_sample_size` rows in all
    (geodiag.metrics.vocabulary_sample)."""
    n = ckpt.new.base_vocab_size
    if not ckpt.remote or ckpt.read.full_vocabulary or n <= opts.vocabulary_sample_rows:
        return None
    size = vocabulary_sample_size(n_new, opts)
    return sample_blocks(n, size, opts.vocabulary_sample_blocks, opts.seed)


def _walk_vocabulary(
    ckpt: Checkpoint, matrix: Matrix, rows: np.ndarray, ids: np.ndarray, opts: AnalyzeOptions
) -> _Vocabulary:
    """Statistics, non-finite rows, the reference sample and the nearest original rows of
    the new ``rows``, from one read of each block of the original rows (all of them, or
    the sample's blocks: :func:`vocabulary_spans`; the reference sample is then drawn
    from the rows read)."""
    spans = vocabulary_spans(ckpt, opts, len(rows))
    pool = None if spans is None else np.concatenate([np.arange(a, b) for a, b in spans])
    sample_ids = reference_ids(ckpt, len(rows), opts, pool)
    stats = VocabularyAccumulator()
    sample = SampleRows(sample_ids, float32_at_scale(len(sample_ids), matrix))
    n_pool = ckpt.new.base_vocab_size if pool is None else len(pool)
    direction_ids = reference_sample(n_pool, DIRECTION_ROWS, opts.seed + 1)
    direction_ids = direction_ids if pool is None else pool[direction_ids]
    directions = SampleRows(direction_ids, True)
    consumers: list = [stats, sample, directions]
    blocks = None if spans is None else BlockFigures(spans)
    if blocks is not None:
        consumers.append(blocks)
    queries = _neighbor_queries(ckpt, rows, opts)
    if queries is not None:
        scan = NearestRows(rows[queries[0]], k=min(opts.neighbors_k, ckpt.new.base_vocab_size))
        consumers.append(scan)
    feed(ckpt.iter_original(matrix, spans=spans), consumers)
    vocab = stats.result()
    if vocab is not None:
        check_original_rows(ckpt, matrix, vocab.nonfinite_rows, ckpt.read.allow_nonfinite)
    sample_rows = sample.rows if sample.complete else read_sample(ckpt, matrix, sample_ids)
    direction_rows = (
        directions.rows if directions.complete else ckpt.read_rows(matrix, direction_ids, True)
    )
    reference = usable_reference(ckpt, matrix, sample_ids, sample_rows)
    neighbors, sampled = (lambda: []), False
    if queries is not None:
        near = scan.result()
        neighbors, sampled = (lambda: _neighbor_list(ckpt, ids, queries[0], near)), queries[1]
    measured = None if blocks is None else blocks.result(ckpt.new.base_vocab_size, opts.seed)
    return _Vocabulary(
        vocab, sample_ids, sample_rows, reference, neighbors, sampled, measured, direction_rows
    )


def measure_matrix(
    ckpt: Checkpoint,
    matrix: Matrix,
    opts: AnalyzeOptions,
    reference: MatrixRows | None = None,
    usage: TokenUsage | None = None,
) -> tuple[MatrixReport, MatrixRows]:
    """(the report of ``matrix``, the rows it read). ``reference``: the rows measuring
    ``ckpt.reference``'s matrix of the same role read, when held (the report's pairs);
    ``usage``: the checkpoint's (:func:`geodiag.io.usage.token_usage`), counted once."""
    with ThreadPoolExecutor(max_workers=1) as beside:
        return _measure_matrix(ckpt, matrix, opts, reference, lambda: usage, beside)


def _beside(
    pool: ThreadPoolExecutor, x: np.ndarray | None, uncentered: bool = True
) -> Callable[[], GeometrySummary | None]:
    """``summarize(x, uncentered=uncentered)`` started in ``pool`` when it runs on one
    BLAS thread (keeps_one_thread): its spectra (LAPACK, the GIL released) then take the
    other core while this thread walks the vocabulary or scores the findings, with the
    same bits; else taken here when asked. Returns what gives the summary (None for no
    ``x``)."""
    if x is None:
        return lambda: None
    return _soon(pool, keeps_one_thread(x.shape), summarize, x, uncentered=uncentered)


def _soon(pool: ThreadPoolExecutor, in_pool: bool, fn: Callable, *args, **kwargs) -> Callable:
    """``fn(*args, **kwargs)`` started in ``pool`` when ``in_pool``, else taken when asked;
    returns what gives its result."""
    if in_pool:
        return pool.submit(fn, *args, **kwargs).result
    return lambda: fn(*args, **kwargs)


def _measure_matrix(
    ckpt: Checkpoint,
    matrix: Matrix,
    opts: AnalyzeOptions,
    reference: MatrixRows | None,
    usage_of: Callable[[], TokenUsage | None],
    beside: ThreadPoolExecutor,
) -> tuple[MatrixReport, MatrixRows]:
    rows, keep = new_rows(ckpt, matrix)
    ids = ckpt.new.ids[keep]
    new_figures = _beside(beside, rows, uncentered=not opts.gate_only)  # during the walk
    walk = _walk_vocabulary(ckpt, matrix, rows, ids, opts) if ckpt.has_vocabulary else None
    vocab = walk.stats if walk is not None else None
    bad_original = np.zeros(0, np.int64) if vocab is None else vocab.nonfinite_rows
    ref_rows, undefined, reference_norms = None, NO_VOCABULARY, None
    if walk is not None:
        ref_rows = walk.reference
        reference_norms = row_norms(ref_rows)
        if len(ref_rows) < MIN_REFERENCE_ROWS or len(rows) < 2:
            undefined = (
                f"only {len(ref_rows)} original row(s) below id {ckpt.new.base_vocab_size}: "
                "too few to compare the new rows' spread with"
                if len(ref_rows) < MIN_REFERENCE_ROWS
                else "a single new row has no spread around its mean"
            )
            ref_rows = None
    held = MatrixRows(
        matrix,
        rows,
        keep,
        np.zeros(0, np.int64) if walk is None else walk.sample_ids,
        None if walk is None else walk.sample_rows,
        read_padding(ckpt, matrix),
        None if walk is None else walk.direction_rows,
    )
    drawn = None  # the initializer's-draw test (its eigensolves), beside RSA and the findings
    if vocab is not None:
        drawn = _soon(
            beside,
            keeps_one_thread(rows.shape),
            draw_finding,
            ckpt,
            rows,
            held.direction_rows,
            vocab.mean,
            vocab.spread,
        )
    # Beside the draw test: the chat template's rendering and the neighbours' names.
    usage = usage_of()
    neighbors = [] if walk is None else walk.neighbors()
    levels, lcos = _levels(ckpt, rows, keep, ref_rows, opts)
    new = relative_to(new_figures(), ref_rows)  # = summarize(rows, ref_rows)
    # During the findings; the gate reads only the reference's spread (relative_to above).
    ref_figures = _beside(beside, None if opts.gate_only else ref_rows)
    untrained = row_findings(
        ckpt,
        matrix,
        rows,
        ids,
        vocab,
        held.sample_ids,
        seed=opts.seed,
        reference_norms=reference_norms,
        held=held,
        reference_held=reference,
        usage=usage,
        drawn=drawn,
        structure=structure_evidence(
            levels, rows, None if ckpt.new.level_index is None else ckpt.new.level_index[keep]
        ),
    )
    norm_ratio = (  # the longest new row, from the summary's norms (not a second pass)
        new.row_norms.max / vocab.max_norm if vocab is not None and vocab.max_norm > 0 else None
    )
    report = MatrixReport(
        role=matrix.role,
        tensor=matrix.tensor,
        file=str(ckpt.store.file_of(matrix.tensor)),
        dtype=matrix.dtype,
        n_rows=matrix.n_rows,
        dim=matrix.dim,
        n_new=len(rows),
        nonfinite_rows_dropped=int((~keep).sum()),
        new=new,
        reference=ref_figures(),
        reference_size=0 if ref_rows is None else len(ref_rows),
        levels=levels,
        level_cosine=lcos,
        neighbors=neighbors,
        neighbors_sampled=walk is not None and walk.neighbors_sampled,
        reference_undefined_reason=None if ref_rows is not None else undefined,
        untrained=untrained,
        norm_ratio=norm_ratio,
        vocabulary_norms=None if vocab is None else vocab.norm_percentiles,
        nonfinite_original_rows_dropped=len(bad_original),
        nonfinite_original_ids=bad_original[:SHOWN_TOKENS].tolist(),
        vocabulary_sample=None if walk is None else walk.vocabulary_sample,
        fed=fed_rows(ckpt, matrix, vocab, usage, opts.seed),
    )
    return report, held


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


def _sample_note(m: MatrixReport, n_matrices: int) -> str:
    """What a sampled vocabulary leaves unknown, and what it stands in for."""
    s = m.vocabulary_sample
    where = f"{'output head' if m.role == 'output' else 'input embedding'}: " * (n_matrices > 1)
    size = s.blocks[0][1] - s.blocks[0][0]
    return (
        f"{where}vocabulary figures from a seeded sample of {s.n_read:,} of {s.n_rows:,} "
        f"original rows ({len(s.blocks)} blocks of {size:,} consecutive rows, seed {s.seed}; "
        f"a remote checkpoint: --full-vocabulary reads every row): spread {s.spread:.4g} "
        f"(standard error {s.spread_se:.2g}), mean norm {s.mean_norm:.4g} (standard error "
        f"{s.mean_norm_se:.2g}); the untrained-row tolerance ({TOLERANCE_RULE}) uses the "
        "sampled spread, the norm percentiles and the largest norm are the sample's, the "
        "vocabulary mean is the sample's (a lone new row left at the true mean is not found "
        "as at the mean; several, as identical rows, are), the "
        "nearest original tokens and the reference rows are drawn from the sampled rows; "
        "NaN/Inf original rows outside the sample are unknown"
    )


def measure_checkpoint(
    ckpt: Checkpoint | str | Path,
    opts: AnalyzeOptions | None = None,
    *,
    read: ReadOptions | None = None,
    reference: list[MatrixRows] | None = None,
    keep_rows: bool = False,
    each: Callable[[MatrixRows], None] | None = None,
) -> CheckpointReport:
    """All geometry metrics of one checkpoint's new tokens, per matrix and per level, each
    row read once. ``ckpt``: an opened checkpoint (a folder, or rows in memory), or a path
    opened with ``read``. ``reference``: what measuring ``ckpt.reference`` read, when the
    caller holds it (the movement since it is then taken from those rows); ``each``: called
    with each matrix's rows (:class:`MatrixRows`) once measured, while they are held: a
    caller that needs the rows again keeps them there, with ``keep_rows``. Without it the
    new rows and the sample are let go as soon as they are no longer needed (an untied
    head's rows are not held beside the embedding's)."""
    if not isinstance(ckpt, Checkpoint):
        ckpt = open_checkpoint(ckpt, read or ReadOptions())
    opts = opts or AnalyzeOptions()
    theirs = {h.matrix.role: h for h in reference or []}
    matrices, held = [], []
    # --data is counted first (a bad file is exit 2 before any row is read); a checkpoint
    # whose one source is its chat template (jinja2's import and rendering: ~65 ms of a
    # 0.6 s `metrics` on SmolLM2) has it rendered after the first walk, while the draw
    # test's eigensolves take the other core. The template's problems are notes, not errors.
    usage_of = functools.cache(functools.partial(token_usage, ckpt))
    if ckpt.read.data:
        usage_of()
    with blas_threads(1), ThreadPoolExecutor(max_workers=1) as beside:
        for m in ckpt.matrices:
            report, rows = _measure_matrix(ckpt, m, opts, theirs.get(m.role), usage_of, beside)
            if not keep_rows:  # the sample served the movement (20,000 x d at most)
                rows.sample_rows = None
            if each is not None:
                each(rows)
            if not keep_rows and len(ckpt.matrices) > 1:
                rows.rows = None
            matrices.append(report)
            held.append(rows)
    report = _checkpoint_report(ckpt, opts, matrices, held)  # integrity: a tied head's check
    usage = usage_of()
    if usage is not None:
        report.usage, report.usage_notes = usage.sources, list(usage.notes)
        report.notes += usage.notes
    if not keep_rows:
        for rows in held:
            rows.rows = None
    return report


def _checkpoint_report(
    ckpt: Checkpoint, opts: AnalyzeOptions, matrices: list[MatrixReport], held: list[MatrixRows]
) -> CheckpointReport:
    notes = [*ckpt.notes, *ckpt.reference_notes]
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
    if m0.reference_undefined_reason is not None:
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
    notes += [_sample_note(m, len(matrices)) for m in matrices if m.vocabulary_sample]
    side = ckpt.sidecar
    health = None
    if side is not None and side.items and ckpt.new.source == "sidecar":
        health = codebook_health(
            side.items, [lv.name for lv in side.levels], [lv.size for lv in side.levels]
        )
    return CheckpointReport(
        geodiag_version=__version__,
        path=ckpt.location or str(ckpt.path),
        store=ckpt.store.description,
        tied=ckpt.tied,
        n_new_tokens=len(ckpt.new.ids),
        new_token_source=ckpt.new.source,
        base_vocab_size=ckpt.new.base_vocab_size,
        level_names=list(ckpt.new.level_names),
        levels_source=ckpt.new.levels_source,
        provenance=ckpt.provenance,
        matrices=matrices,
        digests=ckpt.digests(),
        notes=notes,
        adapter=ckpt.adapter,
        stack=ckpt.stack,
        codebook=health,
        integrity=integrity(ckpt, matrices, held) + audit(ckpt),
        reference=None
        if ckpt.reference is None
        else ckpt.reference.location or str(ckpt.reference.path),
    )


def command_line() -> str:
    return " ".join(["geodiag", *sys.argv[1:]])
