"""``effective_rank``: the centered effective rank of the new rows, absolute. Off by
default: it depends on n (``effective_rank_ratio`` is the same figure over min(n, d)).
Its sentence and diagnosis serve both: rows on a line, or in a thin subspace."""

from __future__ import annotations

from geodiag.analysis.reports import MatrixReport
from geodiag.gate.advice import GROUND, Advice, Diagnosis, diagnosis, g
from geodiag.gate.checks.unit import Check, CheckResult, Reading

RANK = 2  # after the point collapse (spread, cosine), before the untrained rows


def rank_sentence(c: CheckResult, m: MatrixReport) -> str:
    """The finding of either rank check: how many directions the rows span."""
    erank = m.new.centered.effective_rank
    if erank == 0:
        return "the rows are identical: rank 0 around their mean."
    k = min(m.n_new, m.dim)
    shown = f"ratio {g(c.value)}" if c.check == "effective_rank_ratio" else f"rank {g(c.value)}"
    if c.status == "pass":
        return f"{erank:.3g} effective directions of {k} possible ({shown} >= {c.threshold:g})."
    return (
        f"only {erank:.3g} effective direction(s) of {k} ({shown} < {c.threshold:g}): a line or "
        "a thin subspace."
    )


def thin_subspace(m: MatrixReport, failed: list[CheckResult], advice: Advice) -> Diagnosis:
    """The diagnosis of rows that span few directions around their mean."""
    n, g_ = m.n_new, m.new
    if g_.centered.effective_rank == 0:
        return diagnosis(
            f"all {n} new tokens are the same vector (rank 0 around their mean)", advice
        )
    if advice.signature is None:  # nothing says what the rows are: the shape, and a guess
        advice = Advice(
            "they lie on a line or in a thin subspace (e.g. multiples of one vector)",
            f"give each token its own starting point, or {GROUND}",
        )
    return diagnosis(
        f"the {n} new tokens span only {g_.centered.effective_rank:.2g} effective "
        "direction(s) around their mean",
        advice,
        sep=": ",
    )


def _value(m: MatrixReport) -> float | None:
    return m.new.centered.effective_rank


def _read(m: MatrixReport, cfg: object) -> Reading:
    return Reading(_value(m), f"the {m.n_new} new rows span few directions around their mean")


CHECK = Check(
    name="effective_rank",
    direction="min",
    default=None,
    help="Centered effective rank, absolute",
    value=_value,
    read=_read,
    sentence=rank_sentence,
    explain=thin_subspace,
    rank=RANK,
    collapse=True,
)
