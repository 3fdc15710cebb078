"""``mean_pairwise_cosine``: the mean cosine over pairs of new rows. Mean init, with or
without noise, scores ~1: every row points along the shared offset."""

from __future__ import annotations

from geodiag.analysis.reports import MatrixReport
from geodiag.gate.checks.spread_relative import RANK, one_point
from geodiag.gate.checks.unit import Check, CheckResult, Reading


def _value(m: MatrixReport) -> float | None:
    return m.new.mean_pairwise_cosine


def _read(m: MatrixReport, cfg: object) -> Reading:
    cos = _value(m)
    if cos is None:  # two rows or more (one row is a block check's skip): a zero row
        return Reading(None, "a new row has zero norm, so its direction is undefined")
    return Reading(cos, f"the {m.n_new} new rows all point the same way")


def _sentence(c: CheckResult, m: MatrixReport) -> str:
    v, t = c.value, c.threshold
    if c.status == "pass":
        return f"mean pairwise cosine {v:.3g} (<= {t:g}): the rows point in different directions."
    return f"mean pairwise cosine {v:.3g} (> {t:g}): all point the same way, along a shared offset."


CHECK = Check(
    name="mean_pairwise_cosine",
    field="max_mean_cosine",  # the flag kept its older name
    direction="max",
    default=0.9,
    help="Mean pairwise cosine of the new rows",
    metavar="C",
    value=_value,
    read=_read,
    sentence=_sentence,
    explain=one_point,
    rank=RANK,
    collapse=True,
    label="mean pairwise cosine",
)
