"""``effective_rank_ratio``: the centered effective rank of the new rows over min(n, d).
Rows on a line score ~1/min(n, d); exact mean init 0."""

from __future__ import annotations

from geodiag.analysis.reports import MatrixReport
from geodiag.gate.checks.effective_rank import RANK, rank_sentence, thin_subspace
from geodiag.gate.checks.unit import Check, Reading


def _value(m: MatrixReport) -> float | None:
    return m.new.centered.effective_rank_ratio


def _read(m: MatrixReport, cfg: object) -> Reading:
    return Reading(
        _value(m),
        f"the {m.n_new} new rows span few directions around their mean",
    )


CHECK = Check(
    name="effective_rank_ratio",
    direction="min",
    default=0.1,
    help="Centered effective rank / min(n, d)",
    value=_value,
    read=_read,
    sentence=rank_sentence,
    explain=thin_subspace,
    rank=RANK,
    collapse=True,
    label="effective-rank ratio (centered)",
)
