"""Measure one checkpoint (or a pair): read rows, call the metric functions, return dataclasses.

Compute first, render second: the CLI table, the JSON, the gate and the HTML
report all format what :func:`analyze` returns and compute nothing themselves.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

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
from geodiag.analysis.integrity import IntegrityFinding, integrity
from geodiag.errors import InputError
from geodiag.io.checkpoint import (
    Checkpoint,
    Matrix,
    check_original_rows,
    check_rows,
    open_checkpoint,
)
from geodiag.io.options import ReadOptions
from geodiag.metrics.blas import blas_threads
from geodiag.metrics.codebook import CodebookHealth, codebook_health
from geodiag.metrics.geometry import (
    GeometrySummary,
    LevelCosine,
    level_cosine,
    row_norms,
    summarize,
)
from geodiag.metrics.neighbors import nearest_rows
from geodiag.metrics.rsa import RSAResult, rsa
from geodiag.metrics.untrained import vocabulary_stats, zero_rows
from geodiag.version import __version__

if TYPE_CHECKING:  # drift is loaded by the commands that measure it, not by every gate
    from geodiag.metrics.drift import DriftResult
    from geodiag.metrics.quantization import QuantizationFindings


@dataclass(frozen=True)
class AnalyzeOptions:
    reference_size: int | None = None  # default: as many original rows as new ones (capped)
    reference_cap: int = 20_000
    seed: int = 0
    n_permutations: int = 1000
    rsa_max_items: int = 1000  # RSA on a seeded sample above this many tokens per level
    neighbors_k: int = 5
    neighbors_max: int = 500  # nearest originals for a seeded sample of this many new tokens


@dataclass
class LevelMetrics:
    name: str
    n_tokens: int
    geometry: GeometrySummary
    rsa: RSAResult | None
    rsa_skip_reason: str | None


@dataclass
class Neighbor:
    id: int
    token: str
    cosine: float


@dataclass
class TokenNeighbors:
    id: int
    token: str
    nearest: list[Neighbor]


@dataclass
class MatrixReport:
    role: str  # "input" | "output" (an untied head is its own matrix)
    tensor: str
    dtype: str
    n_rows: int
    dim: int
    n_new: int  # rows measured (after dropping non-finite ones, if allowed)
    nonfinite_rows_dropped: int
    new: GeometrySummary
    reference: GeometrySummary | None  # None: no original vocabulary (--all-rows-new)
    reference_size: int
    levels: list[LevelMetrics]
    level_cosine: LevelCosine | None
    neighbors: list[TokenNeighbors]
    neighbors_sampled: bool
    # Why the vocabulary-relative figures (spread ratio, nearest original tokens) are null.
    reference_undefined_reason: str | None = None
    untrained: UntrainedRows | None = None
    # Largest new-row norm / largest original-row norm (all original rows); None without
    # a vocabulary. Rows far longer than any known token dominate every softmax.
    norm_ratio: float | None = None
    # Percentiles of the original rows' norms (geodiag.metrics.untrained.NORM_PERCENTILES).
    vocabulary_norms: dict[str, float] | None = None
    # Original rows left out of every vocabulary figure as NaN/Inf (--allow-nonfinite;
    # without it they are bad input), and the first SHOWN_TOKENS of their ids.
    nonfinite_original_rows_dropped: int = 0
    nonfinite_original_ids: list[int] = field(default_factory=list)


@dataclass
class CheckpointReport:
    geodiag_version: str
    path: str
    store: str
    tied: bool
    n_new_tokens: int
    new_token_source: str
    base_vocab_size: int
    level_names: list[str]
    levels_source: str | None
    provenance: dict
    matrices: list[MatrixReport]
    digests: dict[str, str]
    notes: list[str] = field(default_factory=list)
    adapter: dict = field(default_factory=dict)  # PEFT adapter read over a base: what it changed
    stack: dict = field(default_factory=dict)  # the training stack that wrote it, when known
    # Usage of the codes by the sidecar's items (None without a sidecar's items).
    codebook: CodebookHealth | None = None
    integrity: list[IntegrityFinding] = field(default_factory=list)  # save / merge / reload
    reference: str | None = None  # --reference, when given


def _reference_ids(ckpt: Checkpoint, n_new: int, opts: AnalyzeOptions) -> np.ndarray:
    size = opts.reference_size or min(n_new, opts.reference_cap)
    size = min(size, ckpt.new.base_vocab_size)
    rng = np.random.default_rng(opts.seed)
    return np.sort(rng.choice(ckpt.new.base_vocab_size, size=size, replace=False)).astype(np.int64)


# Rows are held in float64 up to this many entries (128 MiB); above, as float32 wherever
# that holds the stored values exactly (the store decides: not F64, not a merged LoRA
# delta), half the memory: 100,000 new rows x 1,024 are 410 MB instead of 819 MB. The
# metrics sum in float64 either way (geodiag.metrics.geometry.as_matrix), so the figures
# differ only by the order of some float64 sums.
FLOAT64_ROWS_MAX_ELEMENTS = 16 * 2**20


def _float32_at_scale(n_rows: int, matrix: Matrix) -> bool:
    return n_rows * matrix.dim > FLOAT64_ROWS_MAX_ELEMENTS


def _reference_rows(
    ckpt: Checkpoint, matrix: Matrix, opts: AnalyzeOptions, n_new: int
) -> np.ndarray:
    ids = _reference_ids(ckpt, n_new, opts)
    rows = ckpt.read_rows(matrix, ids, _float32_at_scale(len(ids), matrix))
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


def new_rows(ckpt: Checkpoint, matrix: Matrix) -> tuple[np.ndarray, np.ndarray]:
    """(rows (n_kept, d), kept mask (n,)) of the new tokens in ``matrix``: float64, or
    float32 above FLOAT64_ROWS_MAX_ELEMENTS where that is exact. Non-finite rows fail, or
    are dropped under the checkpoint's ``--allow-nonfinite``."""
    ids = ckpt.new.ids
    rows = ckpt.read_rows(matrix, ids, _float32_at_scale(len(ids), matrix))
    keep = check_rows(ckpt, matrix, rows, ckpt.read.allow_nonfinite)
    return (rows if keep.all() else rows[keep]), keep  # no second (n, d) copy


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
        level_rows = _selected(rows, sel)
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


def _selected(rows: np.ndarray, sel: np.ndarray) -> np.ndarray:
    """rows[sel] for a boolean mask; a view, not a copy, when the selected rows are one
    run (a level's tokens usually are: 33,000 rows x 1,024 are 135 MB in float32)."""
    pos = np.flatnonzero(sel)
    if len(pos) and pos[-1] - pos[0] + 1 == len(pos):
        return rows[pos[0] : pos[-1] + 1]
    return rows[sel]


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
        sample = _reference_ids(ckpt, len(rows), opts)
        reference = _reference_rows(ckpt, matrix, opts, len(rows))
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


@dataclass
class DriftReport:
    before: str
    after: str
    matrix: str
    n_tokens: int
    drift: DriftResult
    levels: dict[str, DriftResult]
    quantization: QuantizationFindings | None = None  # when AFTER is a GGUF file


def analyze_drift(
    before: str | Path,
    after: str | Path,
    read: ReadOptions | None = None,
    opts: AnalyzeOptions | None = None,
) -> list[DriftReport]:
    """Per-token cosine and structure RSA between two checkpoints with the same new tokens."""
    opts = opts or AnalyzeOptions()
    read = dataclasses.replace(read or ReadOptions(), reference=None)
    a = open_checkpoint(before, read)
    b = open_checkpoint(after, _deployed_read(read, a, Path(after)))
    if a.new.tokens != b.new.tokens or not np.array_equal(a.new.ids, b.new.ids):
        raise InputError(
            after, f"new tokens differ from those of {before}: drift needs the same vocabulary"
        )
    out = []
    with blas_threads(1):
        for ma, mb in zip(a.matrices, b.matrices, strict=False):
            out.append(_drift_matrix(a, b, ma, mb, before, after, opts))
    return out


def _deployed_read(read: ReadOptions, a: Checkpoint, after: Path) -> ReadOptions:
    """A GGUF file converted from ``a`` keeps its token ids: without a sidecar of its own
    it is read with ``a``'s (levels, codes), checked against its token list."""
    from dataclasses import replace

    from geodiag.io.sidecar import FILENAME

    own = after.parent / FILENAME
    theirs = (a.path if a.path.is_dir() else a.path.parent) / FILENAME
    if after.suffix != ".gguf" or read.sidecar or own.is_file() or not theirs.is_file():
        return read
    return replace(read, sidecar=theirs)


def _drift_matrix(
    a: Checkpoint, b: Checkpoint, ma: Matrix, mb: Matrix, before, after, opts: AnalyzeOptions
) -> DriftReport:
    from geodiag.metrics.drift import drift

    if ma.dim != mb.dim:
        raise InputError(after, f"'{mb.tensor}' has {mb.dim} dims, '{before}' has {ma.dim}")
    deployed = getattr(b.store, "dequantizes", False)  # a deployed file: what export did
    if _float32_at_scale(len(a.new.ids), ma) and not deployed:
        return _streamed_drift_matrix(a, b, ma, mb, before, after, opts)
    ra, ka = new_rows(a, ma)
    rb, kb = new_rows(b, mb)
    if not (ka.all() and kb.all()):
        raise InputError(after, "drift needs every new row finite in both checkpoints")
    kw = dict(n_permutations=opts.n_permutations, seed=opts.seed, max_items=opts.rsa_max_items)
    levels = {}
    if a.new.level_index is not None:
        for li, name in enumerate(a.new.level_names):
            sel = a.new.level_index == li
            levels[name] = drift(_selected(ra, sel), _selected(rb, sel), **kw)
    whole = drift(ra, rb, **kw)
    found = None
    if deployed:
        from geodiag.metrics.quantization import quantization_findings

        books = a.codebooks or b.codebooks
        masks = {n: a.new.level_index == li for li, n in enumerate(a.new.level_names)}
        found = quantization_findings(
            ra,
            rb,
            dtype=mb.dtype,
            tokens=a.new.tokens,
            structure=whole.structure_rsa,
            levels={n: (masks[n], book) for n, book in books.items()},
            **kw,
        )
    return DriftReport(str(before), str(after), ma.role, len(ra), whole, levels, found)


def _streamed_drift_matrix(
    a: Checkpoint, b: Checkpoint, ma: Matrix, mb: Matrix, before, after, opts: AnalyzeOptions
) -> DriftReport:
    """_drift_matrix at scale: both checkpoints' rows read a block at a time, not held."""
    from geodiag.metrics.drift import streamed_drift

    ids = a.new.ids

    def reader(ckpt: Checkpoint, matrix: Matrix):
        def read(pos: np.ndarray) -> np.ndarray:
            rows = ckpt.read_rows(matrix, ids[pos], float32=True)
            bad = ~np.isfinite(rows).all(axis=1)
            if bad.any():
                raise InputError(
                    ckpt.store.file_of(matrix.tensor),
                    f"new-token rows of '{matrix.tensor}' hold NaN/Inf (ids "
                    f"{ids[pos][bad][:5].tolist()}): drift needs every new row finite in both "
                    "checkpoints",
                )
            return rows

        return read

    subsets = {}
    if a.new.level_index is not None:
        subsets = {
            name: np.flatnonzero(a.new.level_index == li)
            for li, name in enumerate(a.new.level_names)
        }
    whole, levels = streamed_drift(
        len(ids),
        reader(a, ma),
        reader(b, mb),
        subsets,
        n_permutations=opts.n_permutations,
        seed=opts.seed,
        max_items=opts.rsa_max_items,
    )
    return DriftReport(str(before), str(after), ma.role, len(ids), whole, levels, None)


def command_line() -> str:
    return " ".join(["geodiag", *sys.argv[1:]])
