"""One sentence of cause and remedy per gate check, in the terms of someone who just ran an init.

The gate (:mod:`geodiag.gate`) decides pass / warn / fail; this module only explains
its decisions. Remedies name the bundled commands (``gti init --strategy gti``).
"""

from __future__ import annotations

from dataclasses import dataclass

from geodiag.analysis import CheckpointReport, MatrixReport
from geodiag.gate import CheckResult, GateResult

GTI = "`gti init --strategy gti`"
GROUND = f"ground them with {GTI}"
_ORDER = {"fail": 0, "warn": 1, "pass": 2, "skip": 3}


@dataclass
class CheckVerdict:
    name: str
    matrix: str
    status: str  # "pass" | "warn" | "fail" | "skip"
    value: float | None
    threshold: float | None
    sentence: str


@dataclass
class Verdict:
    status: str  # worst of the checks: "fail" | "warn" | "pass"
    sentence: str  # the diagnosis: cause and remedy
    checks: list[CheckVerdict]


def _g(x: float | None, digits: int = 3) -> str:
    return "undefined" if x is None else f"{x:.{digits}g}"


def _where(m: MatrixReport) -> str:
    return "output head: " if m.role == "output" else ""


def _rsa_sentence(c: CheckResult, m: MatrixReport) -> str:
    level = c.name[len("rsa[") : -1]
    lv = next(lv for lv in m.levels if lv.name == level)
    if lv.rsa is None:
        hint = "; pass --codebooks FILE" if "codebook" in (lv.rsa_skip_reason or "") else ""
        return f"level {level}: not measured ({lv.rsa_skip_reason}){hint}."
    r, p = lv.rsa.spearman, lv.rsa.p_value
    if r is None:
        return f"level {level}: RSA undefined, the rows have no pairwise structure; {GROUND}."
    if c.status == "fail":
        return f"level {level}: RSA {r:.3f} < {c.threshold:g}, the codebook's structure is lost; {GROUND}."
    if c.status == "warn":
        return f"level {level}: RSA {r:.3f} (p = {_g(p)}), no trace of the codebook; {GROUND}."
    return f"level {level} keeps the codebook's structure: RSA {r:.3f} (p = {_g(p)})."


def check_sentence(c: CheckResult, m: MatrixReport) -> str:
    """Cause (and, unless it passed, remedy) of one gate check, in one sentence."""
    if c.name.startswith("rsa["):
        return _rsa_sentence(c, m)
    if c.status == "skip":
        return c.message
    g, v, t = m.new, c.value, c.threshold
    k = min(m.n_new, m.dim)
    ok = c.status == "pass"
    if c.name in ("effective_rank_ratio", "effective_rank"):
        erank = g.centered.effective_rank
        if erank == 0:
            return f"the rows are identical: rank 0 around their mean; {GROUND}."
        shown = f"ratio {_g(v)}" if c.name == "effective_rank_ratio" else f"rank {_g(v)}"
        if ok:
            return f"{erank:.3g} effective directions of {k} possible ({shown} >= {t:g})."
        return (
            f"only {erank:.3g} effective direction(s) of {k} ({shown} < {t:g}): a line or a thin "
            f"subspace; give each token its own init, e.g. {GTI}."
        )
    if c.name == "spread_ratio":
        if v is None:
            return f"spread ratio undefined ({c.message})."
        if ok:
            return f"spread {v:.3g}x the vocabulary's (>= {t:g})."
        return (
            f"spread only {v:.2g}x the vocabulary's (< {t:g}): one point, as after mean init; "
            f"{GROUND} or check that your init ran."
        )
    if c.name == "mean_cosine":
        if ok:
            return (
                f"mean pairwise cosine {v:.3g} (<= {t:g}): the rows point in different directions."
            )
        return f"mean pairwise cosine {v:.3g} (> {t:g}): all point the same way, as after mean init; {GROUND}."
    return c.message


def _collapse(m: MatrixReport, failed: set[str]) -> str | None:
    """The diagnosis of a failed matrix, most specific cause first."""
    n, g = m.n_new, m.new
    if "spread_ratio" in failed or "mean_cosine" in failed:
        if g.spread == 0:
            return (
                f"all {n} new tokens are the same vector: mean initialization (or an init that "
                f"never ran); {GROUND} or check that your init ran."
            )
        if "spread_ratio" in failed and g.spread_relative is not None:
            return (
                f"all {n} new tokens lie within {g.spread:.1g} (RMS) of one point, "
                f"{g.spread_relative:.1g}x the spread of the original vocabulary: mean initialization, "
                f"perhaps with small noise; {GROUND} or check that your init ran."
            )
        return (
            f"the {n} new tokens all point the same way (mean cosine {_g(g.mean_pairwise_cosine)}): "
            f"a shared offset dominates them, as after mean initialization; {GROUND}."
        )
    if failed & {"effective_rank_ratio", "effective_rank"}:
        return (
            f"the {n} new tokens span only {g.centered.effective_rank:.2g} effective direction(s) "
            "around their mean: they lie on a line or in a thin subspace (e.g. multiples of one "
            f"vector); give each token its own starting point, or {GROUND}."
        )
    rsa_failed = sorted(name[4:-1] for name in failed if name.startswith("rsa["))
    if rsa_failed:
        return (
            f"level(s) {', '.join(rsa_failed)} do not reproduce the codebook's structure; "
            f"{GROUND} before fine-tuning."
        )
    return None


def _likely_cause(provenance: dict) -> str:
    """Why rows that are not collapsed carry no structure, in the sidecar's terms when it has them."""
    strategy = provenance.get("init_strategy") or provenance.get("strategy")
    stage = provenance.get("stage")
    if strategy == "mean" and stage not in (None, "init"):
        return f"training did not recover the structure the mean initialization erased; {GROUND} before SFT"
    if strategy == "random":
        return f"as expected of a random initialization; {GROUND} so they inherit the codebook's structure"
    return f"a random initialization looks like this; {GROUND} so they inherit the codebook's structure"


def _structure(m: MatrixReport, checks: list[CheckResult], provenance: dict) -> str:
    """The diagnosis of a matrix that is not collapsed: does it carry the codebook's structure?"""
    g = m.new
    healthy = (
        f"not collapsed (effective rank {_g(g.centered.effective_rank)}, "
        f"spread {_g(g.spread_relative, 2)}x the vocabulary's)"
    )
    rsa = [c for c in checks if c.name.startswith("rsa[")]
    measured = [
        lv.rsa.spearman for lv in m.levels if lv.rsa is not None and lv.rsa.spearman is not None
    ]
    warned = [c.name[4:-1] for c in rsa if c.status == "warn"]
    if warned and len(warned) == len(rsa):
        r = f"~{sum(measured) / len(measured):.2f}" if measured else "undefined"
        return (
            f"{healthy} but carries no structure (RSA {r} vs the codebooks, no level significant): "
            f"{_likely_cause(provenance)}."
        )
    if warned:
        return (
            f"{healthy}; level(s) {', '.join(warned)} carry no trace of the codebook's structure, "
            f"the others do; {GROUND} if those levels matter."
        )
    if measured and len(measured) == len(m.levels):
        return (
            f"healthy: {healthy}, and every level keeps the codebook's structure "
            f"(RSA {min(measured):.2f} to {max(measured):.2f})."
        )
    reason = next((lv.rsa_skip_reason for lv in m.levels if lv.rsa is None), None)
    if not m.levels:
        reason = "levels unknown (no sidecar; token names do not match --level-pattern)"
    return f"{healthy}; structure against the codebooks not measured: {reason}."


def verdict(report: CheckpointReport, gate: GateResult) -> Verdict:
    """Overall status, the one-sentence diagnosis, and a sentence per enabled check."""
    by_role = {m.role: m for m in report.matrices}
    shown = [c for c in gate.checks if not (c.status == "skip" and c.message == "check disabled")]
    checks = [
        CheckVerdict(
            c.name, c.matrix, c.status, c.value, c.threshold, check_sentence(c, by_role[c.matrix])
        )
        for c in shown
    ]
    status = min((c.status for c in gate.checks), key=_ORDER.__getitem__, default="pass")
    status = "pass" if status == "skip" else status
    sentences = []
    for m in report.matrices:
        mine = [c for c in gate.checks if c.matrix == m.role]
        failed = {c.name for c in mine if c.status == "fail"}
        text = _collapse(m, failed) if failed else _structure(m, mine, report.provenance)
        sentences.append(_where(m) + (text or "see the failed checks below."))
    sentence = " ".join(s[0].upper() + s[1:] for s in sentences)
    return Verdict(status, sentence, checks)
