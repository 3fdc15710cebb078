"""``spread_relative``: the RMS spread of the new rows over that of an equal-size sample of
original rows. Mean + 1e-9*Sigma noise (transformers' ``mean_resizing``) scores ~3e-5, a
random init matched to the vocabulary ~1. Its diagnosis, one point, serves
``mean_pairwise_cosine`` too."""

from __future__ import annotations

from geodiag.analysis.reports import MatrixReport
from geodiag.gate.advice import Advice, Diagnosis, diagnosis, g
from geodiag.gate.checks.unit import Check, CheckResult, Reading
from geodiag.gate.signature import COLLAPSED

NAME = "spread_relative"
RANK = 1  # after untrained rows no init ran on; before the rank checks


def one_point(m: MatrixReport, failed: list[CheckResult], advice: Advice) -> Diagnosis:
    """The diagnosis of rows that sit at one point, or all point one way: a mean init."""
    n, g_ = m.n_new, m.new
    if g_.spread == 0:
        head = (
            f"all {n} new tokens are the same vector: mean initialization (or an init that "
            "never ran)"
        )
    elif any(c.check == NAME for c in failed) and g_.spread_relative is not None:
        head = (
            f"all {n} new tokens lie within {g_.spread:.1g} (RMS) of one point, "
            f"{g_.spread_relative:.1g}x the spread of the original vocabulary: mean "
            "initialization, perhaps with small noise"
        )
    else:
        head = (
            f"the {n} new tokens all point the same way (mean pairwise cosine "
            f"{g(g_.mean_pairwise_cosine)}): a shared offset dominates them"
        )
        if advice.signature is None or advice.signature in COLLAPSED:
            head += ", as after mean initialization"
    return diagnosis(head, advice)


def _value(m: MatrixReport) -> float | None:
    return m.new.spread_relative  # None without a vocabulary


def _read(m: MatrixReport, cfg: object) -> Reading:
    if m.reference_undefined_reason is not None:
        return Reading(None, m.reference_undefined_reason, measurable=False)
    return Reading(
        _value(m),
        f"the {m.n_new} new rows sit within a tiny ball compared with the original "
        "vocabulary (mean initialization, with or without small noise)",
    )


def _sentence(c: CheckResult, m: MatrixReport) -> str:
    v, t = c.value, c.threshold
    if v is None:
        return f"spread relative to the vocabulary undefined ({c.message})."
    if c.status == "pass":
        return f"spread {v:.3g}x the vocabulary's (>= {t:g})."
    return f"spread only {v:.2g}x the vocabulary's (< {t:g}): one point, as after mean init."


CHECK = Check(
    name=NAME,
    field="min_spread_ratio",  # the flag kept its older name
    direction="min",
    default=0.05,
    help="RMS spread of the new rows / that of an equal-size sample of original rows",
    metavar="S",
    value=_value,
    read=_read,
    sentence=_sentence,
    explain=one_point,
    rank=RANK,
    collapse=True,
    label="spread / vocabulary spread",
)
