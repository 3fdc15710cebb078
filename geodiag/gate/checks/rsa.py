"""``rsa``: Spearman RSA of each level's rows against its codebook, one result per level.
Off by default: a random init has no structure but is not collapsed, so a low RSA whose
p-value is not significant (:data:`geodiag.metrics.rsa.SIGNIFICANCE`) warns."""

from __future__ import annotations

from geodiag.analysis.reports import MatrixReport
from geodiag.gate.advice import GROUND, Advice, Diagnosis, diagnosis, g
from geodiag.gate.checks.unit import Check, CheckResult, format_value, shown_name
from geodiag.metrics.rsa import SIGNIFICANCE, SMALL_EFFECT


def rsa_by_level(m: MatrixReport) -> dict[str, float | None]:
    """{level: Spearman RSA against its codebook}, None where not measured or undefined."""
    return {lv.name: (lv.rsa.spearman if lv.rsa else None) for lv in m.levels}


def rsa_p_by_level(m: MatrixReport) -> dict[str, float | None]:
    """{level: the RSA's permutation p-value}, None where not measured or undefined."""
    return {lv.name: (lv.rsa.p_value if lv.rsa else None) for lv in m.levels}


def _read_levels(check: Check, m: MatrixReport, threshold: float | None) -> list[CheckResult]:
    """One result per level. Off (the default), a low RSA warns: a random init has no
    structure but is not collapsed."""
    out, values, name_ = [], rsa_by_level(m), check.name
    for lv in m.levels:
        name = shown_name(name_, lv.name)
        if lv.rsa is None:
            status = "fail" if threshold is not None else "skip"
            # The reason is often the checkpoint's note ("...: RSA skipped"): said once here.
            reason = (lv.rsa_skip_reason or "").removesuffix(": RSA skipped")
            msg = f"{name} not measured: {reason}"
            out.append(CheckResult(name_, m.role, status, None, threshold, msg, lv.name))
            continue
        r, p = values[lv.name], lv.rsa.p_value
        if r is None:
            status = "fail" if threshold is not None else "warn"
            msg = f"{name} undefined: {lv.rsa.undefined_reason}"
        elif threshold is not None:
            status = "pass" if r >= threshold else "fail"
            msg = (
                f"{name} {r:.3f} (p={format_value(p)}) {'>=' if r >= threshold else '<'} "
                f"{threshold:g}"
            )
        elif p is not None and p >= SIGNIFICANCE:
            status = "warn"
            # The remedy depends on how the rows were made: the verdict gives it.
            msg = f"{name} {r:.3f} (p={p:.3g}): the rows carry no trace of the codebook's structure"
        else:
            status, msg = "pass", f"{name} {r:.3f} (p={format_value(p)})"
        out.append(CheckResult(name_, m.role, status, r, threshold, msg, lv.name))
    return out


def _sentence(c: CheckResult, m: MatrixReport) -> str:
    level = c.level
    lv = next(lv for lv in m.levels if lv.name == level)
    if lv.rsa is None:
        reason = (lv.rsa_skip_reason or "").removesuffix(": RSA skipped")
        return f"level {level}: not measured ({reason})."
    r, p = lv.rsa.spearman, lv.rsa.p_value
    if r is None:
        return f"level {level}: RSA undefined, the rows have no pairwise structure."
    if c.status == "fail":
        return f"level {level}: RSA {r:.3f} < {c.threshold:g}, the codebook's structure is lost."
    if c.status == "warn":
        return f"level {level}: RSA {r:.3f} (p = {g(p)}), no trace of the codebook."
    if r < SMALL_EFFECT:  # significant, yet under a small effect: a trace, not the structure
        return (
            f"level {level}: a faint trace of the codebook's structure, RSA {r:.3f} "
            f"(p = {g(p)}), significant but under a small effect ({SMALL_EFFECT:g})."
        )
    return f"level {level} keeps the codebook's structure: RSA {r:.3f} (p = {g(p)})."


def _explain(m: MatrixReport, failed: list[CheckResult], advice: Advice) -> Diagnosis:
    levels = sorted(str(c.level) for c in failed if c.check == "rsa")
    return diagnosis(
        f"level(s) {', '.join(levels)} do not reproduce the codebook's structure",
        Advice(None, f"{GROUND} before fine-tuning"),
    )


CHECK = Check(
    name="rsa",
    direction="min",
    default=None,
    help="Spearman RSA against the codebooks, every level",
    metavar="R",
    scope="level",
    read_levels=_read_levels,
    sentence=_sentence,
    explain=_explain,
    rank=6,
    label="RSA against the codebook, per level",
)
