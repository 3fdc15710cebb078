"""``norm_ratio``: the longest new row over the longest original row. Logits scale with the
norm: a row 10x longer than any token the model knows wins every softmax it enters."""

from __future__ import annotations

from geodiag.analysis.reports import MatrixReport
from geodiag.gate.advice import Advice, Diagnosis, diagnosis, g
from geodiag.gate.checks.unit import Check, CheckResult, Reading


def _value(m: MatrixReport) -> float | None:
    return m.norm_ratio


def _read(m: MatrixReport, cfg: object) -> Reading:
    r = _value(m)
    if r is None:
        return Reading(None, "no original vocabulary to compare the new rows' norms with")
    return Reading(
        r,
        "the longest new row is far longer than any original row: the model "
        "will emit it everywhere",
    )


def _sentence(c: CheckResult, m: MatrixReport) -> str:
    v, t = c.value, c.threshold
    if c.status == "pass":
        return f"the longest new row is {v:.3g}x the longest original row (<= {t:g})."
    return (
        f"the longest new row is {v:.3g}x the longest original row (> {t:g}): logits scale "
        "with the norm, so the model will emit it everywhere."
    )


def _explain(m: MatrixReport, failed: list[CheckResult], advice: Advice) -> Diagnosis:
    return diagnosis(
        f"the longest new row is {g(m.norm_ratio)}x the longest original row: the model "
        "will emit it everywhere",
        Advice(None, "rescale the new rows to the vocabulary's norms"),
    )


CHECK = Check(
    name="norm_ratio",
    direction="max",
    default=10.0,
    help="Longest new row / longest original row (logits scale with the norm)",
    metavar="R",
    scope="row",
    value=_value,
    read=_read,
    sentence=_sentence,
    explain=_explain,
    rank=4,
)
