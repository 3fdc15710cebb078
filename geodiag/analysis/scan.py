"""The whole vocabulary scanned for under-trained tokens, from the files alone (``geodiag scan``).

Magikarp (Land & Bartolo 2024) ranks every token by its indicator, then prompts the
model to verify the top candidates. Without running the model, the scan reads every row
of the output matrix (the embedding when tied) and of an untied input embedding, scores
each by the indicator of :mod:`geodiag.metrics.indicators` against the rows the files
mark unused (:func:`geodiag.analysis.indicators.unused_ids`), and lists the tokens past
the cut: the unused rows' own 10th percentile. Every token is scored, new or not; the
counts are exact (the whole matrix), the list is ranked, most under-trained first.
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


@dataclass
class ScannedToken:
    id: int
    token: str
    value: float  # the indicator (a cosine, or an input norm)
    rank: int  # 1: the most under-trained of the rows not marked unused


@dataclass
class MatrixScan:
    role: str
    tensor: str
    indicator: str
    n_rows: int
    n_unused: int  # rows the files mark unused
    unused_sources: list[str]
    judged: bool
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


def scan_matrix(ckpt: Checkpoint, matrix: Matrix, seed: int) -> MatrixScan:
    """Every row of ``matrix`` scored, the cut from the unused rows, the rows past it."""
    unused, sources = unused_ids(ckpt, leave_out_new=False)
    kind = indicator_kind(ckpt, matrix)
    scan = MatrixScan(matrix.role, matrix.tensor, kind, matrix.n_rows, len(unused), sources, False)
    if len(unused) < MIN_UNUSED_ROWS:
        scan.reason = f"{len(unused)} rows marked unused (< {MIN_UNUSED_ROWS}): nothing to rank by"
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
        held = ckpt.read_rows(matrix, read_unused)
        held = held[np.isfinite(held).all(1) & np.any(held != 0, axis=1)]
        if len(held) < MIN_UNUSED_ROWS:
            scan.reason = f"{len(held)} rows marked unused are not zero (< {MIN_UNUSED_ROWS})"
            return scan
        ref = unused_mean(held, pc)
        values = _stream(ckpt, matrix, lambda r: unused_cosine(r, ref))
        own, sign = ref.own, 1.0
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
    ids = np.flatnonzero(past & ~marked)
    ids = ids[np.argsort(-sign * values[ids], kind="stable")]
    scan.under_trained = [
        ScannedToken(int(i), ckpt.token(int(i)), float(values[i]), r + 1)
        for r, i in enumerate(ids.tolist())
    ]
    return scan


def scan_vocabulary(ckpt: Checkpoint, seed: int = 0) -> VocabularyScan:
    """:class:`MatrixScan` of each matrix geodiag found (the embedding, an untied head)."""
    return VocabularyScan(
        ckpt.location or str(ckpt.path), [scan_matrix(ckpt, m, seed) for m in ckpt.matrices]
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
        lines.append(
            f"    rows marked unused: {m.n_unused}"
            + (f" ({', '.join(m.unused_sources)})" if m.unused_sources else "")
        )
        if m.cut is None:
            lines.append(f"    cannot tell: {m.reason}")
            continue
        lines.append(
            f"    median: unused {m.unused_median:.3f}, other rows {m.other_median:.3f}; cut "
            f"{m.cut:.3f} ({m.n_unused_past_cut} of the unused rows pass it)"
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
