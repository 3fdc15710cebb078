"""The whole vocabulary scanned for under-trained tokens, from the files alone (``geodiag scan``).

Magikarp (Land & Bartolo 2024) ranks every token by its indicator, then prompts the
model to verify the top candidates. Without running the model, the scan reads every row
of the output matrix (the embedding when tied) and of an untied input embedding, scores
each by the indicator of :mod:`geodiag.metrics.indicators` against the rows the files
mark unused (:func:`geodiag.analysis.indicators.unused_ids`), and lists the tokens past
the cut: the unused rows' own 10th percentile. Every token is scored, new or not; the
counts are exact (the whole matrix), the list is ranked, most under-trained first.

The reference (:func:`scan_reference`): the rows ``--unused IDS`` names, else those the
files mark unused. Where the files mark fewer than MIN_UNUSED_ROWS (a safetensors SmolLM2:
no reserved names, no token types), magikarp takes a list of the model's known unused
tokens by hand (``magikarp/unused_tokens.py``); the scan says so and falls back, on a
weaker basis it names in its output: the tokenizer's special tokens (what llama.cpp's
converter types CONTROL, the reference of the same model's GGUF), else the
LOWEST_NORM_ROWS rows of least norm. A guessed reference is ranked with the rest (its rows
are candidates, not known unused), each cosine leave-one-out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from geodiag.analysis.indicators import (
    MAX_UNUSED_ROWS,
    OTHER_ROWS,
    indicator_kind,
    unused_ids,
)
from geodiag.errors import InputError
from geodiag.io.checkpoint import Checkpoint, Matrix
from geodiag.metrics.indicators import (
    MIN_UNUSED_ROWS,
    UNDER_TRAINED_RULE,
    indicator_cut,
    principal_directions,
    unused_cosine,
    unused_mean,
)

# Rows per block of the scan (float32: 2.6 MB at Gemma's width).
SCAN_BLOCK = 1024
# The last fallback reference: this many rows of least norm (zero rows left out); fewer
# than the smallest never-trained set seen (SmolLM2's 17 specials), so the guess is
# more likely all under-trained, the rest of such rows then ranking as the others.
LOWEST_NORM_ROWS = 16
UNUSED_FLAG = "--unused"
SHOWN_IDS = 10  # reference ids printed (all of them in --json)


@dataclass
class Reference:
    """The rows the indicator is measured against, and on what basis."""

    ids: np.ndarray  # ascending
    sources: list[str]  # what named them: one phrase per source
    basis: str  # "files" | "flag" | "special tokens" | "lowest norm"
    known: bool  # False: a guess, so its rows are ranked with the others
    why: str | None = None  # for a guess: why it was needed, and how to give a better one


def _fallback_why(n_marked: int, what: str) -> str:
    return (
        f"the files mark {n_marked} rows unused (< {MIN_UNUSED_ROWS}), so the reference is "
        f"{what}: a weaker basis (rows guessed, not known, unused; they are ranked too); "
        f"{UNUSED_FLAG} IDS names the rows to use (magikarp keeps such a list per model)"
    )


def scan_reference(ckpt: Checkpoint, matrix: Matrix, unused: list[int] | None = None) -> Reference:
    """The reference of the scan of ``matrix``: ``unused`` (``--unused``), else the rows
    the files mark unused, else the tokenizer's special tokens, else the LOWEST_NORM_ROWS
    rows of least norm (each fallback named, with why, in ``why``)."""
    if unused is not None:
        ids = np.asarray(unused, dtype=np.int64)
        if ids.max() >= matrix.n_rows:
            raise InputError(
                UNUSED_FLAG,
                f"id {int(ids.max())} is past the {matrix.n_rows} rows of {matrix.tensor} in "
                f"{ckpt.location or ckpt.path}",
            )
        return Reference(ids, [f"{len(ids)} named by {UNUSED_FLAG}"], "flag", True)
    marked, sources = unused_ids(ckpt, leave_out_new=False)
    if len(marked) >= MIN_UNUSED_ROWS:
        return Reference(marked, sources, "files", True)
    tok = ckpt.tokenizer
    special = sorted(
        {t.id for t in getattr(tok, "added", []) if t.special and 0 <= t.id < matrix.n_rows}
    )
    if len(special) >= MIN_UNUSED_ROWS:
        what = f"the tokenizer's {len(special)} special tokens (a GGUF types them CONTROL)"
        ids = np.asarray(special, dtype=np.int64)
        return Reference(
            ids,
            [f"{len(ids)} special tokens"],
            "special tokens",
            False,
            _fallback_why(len(marked), what),
        )
    norms = _stream(ckpt, matrix, lambda r: np.linalg.norm(r.astype(np.float64), axis=1))
    candidates = np.flatnonzero(np.isfinite(norms) & (norms > 0))
    low = np.sort(candidates[np.argsort(norms[candidates], kind="stable")[:LOWEST_NORM_ROWS]])
    what = f"the {len(low)} rows of least norm"
    return Reference(
        low, [f"{len(low)} of least norm"], "lowest norm", False, _fallback_why(len(marked), what)
    )


@dataclass
class ScannedToken:
    id: int
    token: str
    value: float  # the indicator (a cosine, or an input norm)
    rank: int  # 1: the most under-trained of the rows ranked (a known reference's left out)


@dataclass
class MatrixScan:
    role: str
    tensor: str
    indicator: str
    n_rows: int
    n_unused: int  # rows of the reference (the rows the files mark unused, by default)
    unused_sources: list[str]
    judged: bool
    reference: str = "files"  # Reference.basis
    reference_why: str | None = None  # a guessed reference: why, and the flag for a better one
    reference_ids: list[int] = field(default_factory=list)  # unless the files': the rows
    reason: str | None = None
    cut: float | None = None
    unused_median: float | None = None
    other_median: float | None = None  # the rows not marked unused
    n_unused_past_cut: int = 0
    n_other_past_cut: int = 0
    other_past_cut_share: float | None = None  # the rule's rate on the other rows, exact
    under_trained: list[ScannedToken] = field(default_factory=list)  # ranked, all of them
    rule: str = UNDER_TRAINED_RULE


@dataclass
class VocabularyScan:
    checkpoint: str
    matrices: list[MatrixScan]


def _stream(ckpt: Checkpoint, matrix: Matrix, score) -> np.ndarray:
    """(n_rows,) ``score(rows)`` over every row of ``matrix``, a block at a time."""
    out = np.empty(matrix.n_rows)
    for start in range(0, matrix.n_rows, SCAN_BLOCK):
        stop = min(start + SCAN_BLOCK, matrix.n_rows)
        rows = ckpt.store.read_block(matrix.tensor, start, stop, float32=True)
        out[start:stop] = score(rows)
    return out


def scan_matrix(
    ckpt: Checkpoint, matrix: Matrix, seed: int, unused_flag: list[int] | None = None
) -> MatrixScan:
    """Every row of ``matrix`` scored, the cut from the reference's rows, the rows past it."""
    ref_rows = scan_reference(ckpt, matrix, unused_flag)
    unused, sources = ref_rows.ids, ref_rows.sources
    kind = indicator_kind(ckpt, matrix)
    scan = MatrixScan(matrix.role, matrix.tensor, kind, matrix.n_rows, len(unused), sources, False)
    scan.reference, scan.reference_why = ref_rows.basis, ref_rows.why
    if ref_rows.basis != "files":
        scan.reference_ids = unused.tolist()
    if len(unused) < MIN_UNUSED_ROWS:
        scan.reason = (
            f"{len(unused)} rows in the reference (< {MIN_UNUSED_ROWS}): nothing to rank by"
        )
        return scan
    rng = np.random.default_rng(seed)
    marked = np.zeros(matrix.n_rows, bool)
    marked[unused] = True
    others = np.flatnonzero(~marked)
    read_unused = unused
    if len(unused) > MAX_UNUSED_ROWS:
        read_unused = np.sort(rng.choice(unused, MAX_UNUSED_ROWS, replace=False))
    if kind == "input norm":
        values = _stream(ckpt, matrix, lambda r: np.linalg.norm(r.astype(np.float64), axis=1))
        own = values[unused]
        own, sign = own[own > 0], -1.0  # zero rows: the zero-rows finding's, not a scale
    else:
        picked = np.sort(rng.choice(others, min(OTHER_ROWS, len(others)), replace=False))
        pc = principal_directions(ckpt.read_rows(matrix, picked), 1)[:, 0]
        held_all = ckpt.read_rows(matrix, read_unused)
        held = held_all[np.isfinite(held_all).all(1) & np.any(held_all != 0, axis=1)]
        if len(held) < MIN_UNUSED_ROWS:
            scan.reason = f"{len(held)} rows marked unused are not zero (< {MIN_UNUSED_ROWS})"
            return scan
        held_ids = read_unused[np.isfinite(held_all).all(1) & np.any(held_all != 0, axis=1)]
        ref = unused_mean(held, pc)
        values = _stream(ckpt, matrix, lambda r: unused_cosine(r, ref))
        own, sign = ref.own, 1.0
        if not ref_rows.known:  # ranked too: each against the mean of the others
            values[held_ids] = own
    finite = np.isfinite(values)
    cut = indicator_cut(sign * own[np.isfinite(own)], sign * values[~marked & finite])
    past = finite & (sign * values >= cut.value)
    scan.judged = cut.judged
    scan.cut = sign * cut.value
    scan.unused_median, scan.other_median = sign * cut.unused_median, sign * cut.vocabulary_median
    scan.n_unused_past_cut = int((past & marked).sum())
    scan.n_other_past_cut = int((past & ~marked).sum())
    scan.other_past_cut_share = scan.n_other_past_cut / max(int((~marked & finite).sum()), 1)
    if not cut.judged:
        scan.reason = (
            f"{scan.other_past_cut_share:.1%} of the other rows pass the cut: the indicator "
            "does not single rows out on this model"
        )
    ids = np.flatnonzero(past & ~marked if ref_rows.known else past)
    ids = ids[np.argsort(-sign * values[ids], kind="stable")]
    scan.under_trained = [
        ScannedToken(int(i), ckpt.token(int(i)), float(values[i]), r + 1)
        for r, i in enumerate(ids.tolist())
    ]
    return scan


def scan_vocabulary(
    ckpt: Checkpoint, seed: int = 0, unused: list[int] | None = None
) -> VocabularyScan:
    """:class:`MatrixScan` of each matrix geodiag found (the embedding, an untied head);
    ``unused``: the reference's rows (``--unused``), instead of the files'."""
    return VocabularyScan(
        ckpt.location or str(ckpt.path),
        [scan_matrix(ckpt, m, seed, unused) for m in ckpt.matrices],
    )


def scan_lines(scan: VocabularyScan, top: int) -> list[str]:
    """The scan as terminal lines (names unescaped: the caller escapes per sink)."""
    lines = [f"{scan.checkpoint}: under-trained tokens, from the files"]
    for m in scan.matrices:
        role = (
            "input, tied: the output too"
            if m.indicator.startswith("output") and m.role == "input"
            else m.role
        )
        lines.append(f"  {m.tensor} ({role}): {m.indicator}, {m.n_rows} rows")
        said = f" ({', '.join(m.unused_sources)})" if m.unused_sources else ""
        if m.reference == "files":
            lines.append(f"    rows marked unused: {m.n_unused}{said}")
        else:
            shown = ", ".join(str(i) for i in m.reference_ids[:SHOWN_IDS])
            more = f" and {m.n_unused - SHOWN_IDS} more" if m.n_unused > SHOWN_IDS else ""
            lines.append(f"    reference: {m.n_unused} rows{said}: ids {shown}{more}")
        if m.reference_why:
            lines.append(f"    reference basis: {m.reference_why}")
        ref = "unused" if m.reference == "files" else "reference"
        if m.cut is None:
            lines.append(f"    cannot tell: {m.reason}")
            continue
        lines.append(
            f"    median: {ref} {m.unused_median:.3f}, other rows {m.other_median:.3f}; cut "
            f"{m.cut:.3f} ({m.n_unused_past_cut} of the {ref} rows pass it)"
        )
        lines.append(
            f"    other rows past the cut: {m.n_other_past_cut} "
            f"({m.other_past_cut_share:.2%})" + ("" if m.judged else f"; cannot tell: {m.reason}")
        )
        for t in m.under_trained[:top]:
            lines.append(f"    {t.rank:>6}  {t.value:8.4f}  id {t.id:<7} {t.token}")
        if len(m.under_trained) > top:
            lines.append(f"    ... and {len(m.under_trained) - top} more (--top N, or --json)")
    return lines
