"""``vocabulary_disagreements``: the findings of the vocabulary audit
(:mod:`geodiag.analysis.audit`), one result per checkpoint. The files disagree about the
vocabulary: a loader refuses them, or the model built from them cannot read, emit or
train some new tokens."""

from __future__ import annotations

from geodiag.analysis.audit import AUDIT_KINDS
from geodiag.analysis.reports import CheckpointReport, MatrixReport
from geodiag.gate.advice import Advice, Diagnosis
from geodiag.gate.checks.unit import Check, CheckResult, Reading


def _read(report: CheckpointReport) -> Reading:
    found = [f for f in report.integrity if f.kind in AUDIT_KINDS]
    why = "; ".join(f"{f.kind}: {f.message}" for f in found)
    return Reading(float(len(found)), why, shown=str(len(found)))


def _sentence(c: CheckResult, m: MatrixReport) -> str:
    if c.status == "pass":
        return "the tokenizer, config.json, the matrices and any adapter agree on the vocabulary."
    return f"the files disagree about the vocabulary ({c.message})."


def _explain(m: MatrixReport, failed: list[CheckResult], advice: Advice) -> Diagnosis:
    return Diagnosis(
        "the checkpoint's files disagree about the vocabulary; each finding below names its remedy."
    )


CHECK = Check(
    name="vocabulary_disagreements",
    direction="max",
    default=0,
    count=True,
    help="Findings of the vocabulary audit: tokenizer, config.json, embedding, head, "
    "adapter indices and GGUF token types that disagree",
    metavar="K",
    scope="checkpoint",
    read_report=_read,
    sentence=_sentence,
    explain=_explain,
    rank=5,
)
