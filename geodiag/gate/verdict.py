"""Cause and remedy of a gate result, in the terms of someone who just ran an init.

The gate (:mod:`geodiag.gate.checks`) decides pass / warn / fail; this module only explains
its decisions: one diagnosis per checkpoint, which carries the remedy once, and one
finding per gate check, which states what was measured and no remedy (a card whose six
check lines repeat one remedy reads as six problems). Each check's unit says its finding
and the diagnosis it gives a failed matrix; here the most specific failed check (the
units' ranks) speaks, and a matrix that failed nothing is judged on its structure.
Remedies speak the language of the stack that wrote the checkpoint
(:mod:`geodiag.io.stack`): the option that produced a collapse and its alternative in
transformers, Unsloth, LLaMA-Factory or PEFT, with gti as one option among them. What init
the rows look like, their signature (:mod:`geodiag.gate.signature`: the sidecar's word for
it, else the draw's statistics), names the cause; no init strategy's name is tested here.
"""

from __future__ import annotations

from dataclasses import dataclass

from geodiag.analysis.evidence import suspicion
from geodiag.analysis.reports import CheckpointReport, MatrixReport
from geodiag.gate.advice import GROUND, GTI, PAPER_GROUNDING, Advice, Diagnosis, diagnosis
from geodiag.gate.advice import g as _g
from geodiag.gate.checks import (
    CHECKS,
    DISABLED,
    CheckName,
    CheckResult,
    GateConfig,
    GateResult,
    run_gate,
)
from geodiag.gate.signature import (
    AVERAGED,
    COLLAPSED,
    DRAWN,
    SIGNATURES,
    Signature,
    fingerprint,
    from_provenance,
)
from geodiag.metrics.rsa import SMALL_EFFECT

_ORDER = {"fail": 0, "warn": 1, "pass": 2, "skip": 3}
_BY_NAME = {c.name: c for c in CHECKS}

# What produced a collapse, by the signature the draw's statistics show
# (geodiag.gate.signature.fingerprint).
_CAUSE = {
    "identical": 'an exact mean init (Unsloth\'s `add_new_tokens` default `method="mean"`, '
    "`gti init --strategy mean`, or code copying the mean)",
    "near-identical": "transformers' `resize_token_embeddings(..., mean_resizing=True)` "
    "(the default), which draws new rows from N(mean, 1e-9 Sigma)",
    "unit-noise": "LLaMA-Factory's default `init_special_tokens: noise_init` "
    "(the mean plus N(0, 1/d) per coordinate)",
}
# The alternative inside each stack: give each token its own start, then train it.
_ALTERNATIVE = {
    "transformers": "resize with `mean_resizing=False` and set each new row yourself "
    "(e.g. the mean of its description's subword embeddings) before training",
    "unsloth": 'call `add_new_tokens(..., method="interpolation")` (mixes in each token '
    "string's own subwords: little help for strings like `<a_12>`) or set each row from "
    "its item's description, and train with `embed_tokens`/`lm_head` in `target_modules`",
    "llamafactory": "set `init_special_tokens: desc_init` (or `desc_init_w_noise`) with "
    "`new_special_tokens_config`, a YAML of token: description",
    "peft": "fix the rows in the base before `get_peft_model` (the adapter trains them from "
    "the base's values), e.g. from each item's description",
}


def _gti_provenance(provenance: dict) -> dict:
    """The init's provenance: the sidecar's own, or the one an SFT kept under ``init``."""
    init = provenance.get("init")
    return init if isinstance(init, dict) else provenance


def _named(sig: Signature, report: CheckpointReport) -> str | None:
    """The sidecar's command for the init, where gti wrote it (None otherwise)."""
    if sig.strategy is not None and report.stack.get("name") == "gti":
        return f"the sidecar says `gti init --strategy {sig.strategy}`"
    return None


def _said(sig: Signature, report: CheckpointReport) -> str:
    """What the sidecar says the rows are, with its command where it names one."""
    named = _named(sig, report)
    return f"{named}: {sig.words}" if named else f"the sidecar says the rows are {sig.words}"


def _sidecar_signature(report: CheckpointReport) -> Signature | None:
    return from_provenance(_gti_provenance(report.provenance))


def _trained(sig: Signature) -> str:
    start = f" from {SIGNATURES[sig.start]}" if sig.start in SIGNATURES else ""
    return f"an init grounded for {'?' if sig.steps is None else sig.steps} steps{start}"


def _collapse_remedy(report: CheckpointReport, m: MatrixReport) -> Advice:
    """What produced this collapse, and what to do instead, in the user's stack."""
    stack = report.stack.get("name", "unknown")
    sig = _sidecar_signature(report)
    if sig is not None:
        said = _said(sig, report)
        if sig.name in COLLAPSED:
            return Advice(
                _named(sig, report) or said,
                f"ground them with {GTI}, or start each from its item's text with "
                "`--strategy description-mean`",
                sig.name,
            )
        if sig.name == "trained":
            return Advice(
                f"{_trained(sig)} still looks like its start (the paper grounds {PAPER_GROUNDING})",
                "ground longer (`--steps`)",
                sig.name,
            )
        if sig.name == "code-projection":
            start = f"`--start-from {sig.strategy}`" if _named(sig, report) else "these rows"
            return Advice(
                f"{said}, which span at most the codebooks' own dimension",
                f"ground from them ({GTI} with {start}), which spreads them; their RSA says "
                "how much of the codebooks they keep",
                sig.name,
            )
        if sig.name in AVERAGED:
            return Advice(
                f"{said}; averages of many rows crowd toward the vocabulary mean and share "
                "its direction",
                f"{GROUND}, which spreads them",
                sig.name,
            )
        return Advice(said, f"{GROUND} or check that your init ran", sig.name)
    seen = fingerprint(m)
    cause = _CAUSE.get(seen or "")
    if stack == "gti":  # a sidecar older than its signature: the statistics say what they can
        remedy = (
            f"ground them with {GTI}, or start each from its item's text with "
            "`--strategy description-mean`"
            if seen in COLLAPSED
            else f"{GROUND} or check that your init ran"
        )
        return Advice(f"likely {cause}" if cause else None, remedy)
    if stack == "llamafactory" and report.stack.get("init_special_tokens"):
        cause = f"LLaMA-Factory's `init_special_tokens: {report.stack['init_special_tokens']}`"
    alt = _ALTERNATIVE.get(stack)
    if alt is None:  # unknown stack: the likely producer, and the alternatives in each stack
        alt = (
            "give each token its own start: LLaMA-Factory `init_special_tokens: desc_init`, "
            "transformers `mean_resizing=False` then rows from descriptions"
        )
    return Advice(f"likely {cause}" if cause else None, f"{alt}; or {GROUND}")


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
    sentence: str  # the diagnosis: what was found, its cause and its remedy
    checks: list[CheckVerdict]
    cause: str | None = None  # the cause the sentence names (None: none named)
    remedy: str | None = None  # the remedy the sentence names (None: nothing to do)

    @property
    def words(self) -> str:
        """The outcome as ``geodiag check`` says it: a warning does not fail the gate."""
        if self.status == "fail":
            return "FAIL"
        n = sum(c.status == "warn" for c in self.checks)
        return f"PASS with {n} warning{'s' if n != 1 else ''}" if n else "PASS"


def _where(m: MatrixReport, n_matrices: int) -> str:
    """Which matrix a sentence is about, when there is more than one (an untied head)."""
    if n_matrices < 2:
        return ""
    return f"{'output head' if m.role == 'output' else 'input embedding'} ({m.tensor}): "


def check_sentence(c: CheckResult, m: MatrixReport) -> str:
    """The finding of one gate check, in one sentence, as its unit says it. No remedy: the
    card's diagnosis (:func:`verdict`'s sentence) carries it, once."""
    return _BY_NAME[c.check].say(c, m)


def _collapse(m: MatrixReport, failed_checks: list[CheckResult], advice: Advice) -> Diagnosis:
    """The diagnosis of a failed matrix: the failed checks explain in the order of their
    units' ranks, most specific cause first; the first with something to say gives it."""
    failed = {c.check for c in failed_checks}
    units = sorted((c for c in CHECKS if c.name in failed), key=lambda c: c.rank_of(m))
    tried = set()
    for unit in units:
        if unit.explain in tried:  # two checks, one diagnosis (spread and cosine)
            continue
        tried.add(unit.explain)
        d = unit.explain(m, failed_checks, advice)
        if d is not None:
            return d
    return Diagnosis("see the failed checks below.")


INHERIT = f"{GROUND} so they inherit the codebook's structure"


def _likely_cause(report: CheckpointReport, m: MatrixReport) -> Advice:
    """Why rows that are not collapsed carry no structure, in the checkpoint's own terms."""
    stack = report.stack.get("name", "unknown")
    sig = _sidecar_signature(report)
    if sig is not None:
        if sig.name == "trained":
            init = _gti_provenance(report.provenance)
            sids = init.get("sids_provenance") or {}
            source = (
                f"{sids.get('encoder', 'content')} embeddings of {init.get('data', 'the catalog')}"
            )
            return Advice(
                f"{_trained(sig)}, far short of the paper's {PAPER_GROUNDING}",
                "ground longer (`gti init --strategy gti --steps N`), and check that the item "
                f"descriptions carry what the codebook encodes (the SIDs come from {source}; "
                "grounding can only transfer what the texts say)",
            )
        if sig.name in COLLAPSED and report.provenance.get("stage") not in (None, "init"):
            return Advice(
                "training did not recover the structure the mean initialization erased",
                f"{GROUND} before SFT",
            )
        said = _said(sig, report)
        if sig.name in DRAWN:
            return Advice(
                f"as expected of {sig.words} ({_named(sig, report) or 'the sidecar says so'})",
                INHERIT,
            )
        if sig.name == "code-projection":
            return Advice(
                f"{said}, yet they carry none of the codebooks' structure",
                "check that the codebooks measured are the ones the rows were projected from",
            )
        if sig.name in AVERAGED:
            return Advice(
                f"{said}; text's similarities need not be the codebook's",
                INHERIT,
            )
        return Advice(said, INHERIT)
    if stack == "gti":
        return Advice("a random initialization looks like this", INHERIT)
    if fingerprint(m) == "unit-noise" or stack == "llamafactory":
        return Advice(
            "LLaMA-Factory's `noise_init` (mean plus N(0, 1/d)) looks like this: not collapsed at "
            "this vocabulary's scale, but random",
            "set `init_special_tokens: desc_init` with `new_special_tokens_config` descriptions, "
            f"or {GROUND}",
        )
    alt = _ALTERNATIVE.get(stack, _ALTERNATIVE["transformers"])
    return Advice("a random initialization looks like this", f"{alt}; or {GROUND}")


def _structure(report: CheckpointReport, m: MatrixReport, checks: list[CheckResult]) -> Diagnosis:
    """The diagnosis of a matrix that is not collapsed: does it carry the codebook's structure?"""
    g = m.new
    spread = (
        f"spread {_g(g.spread_relative, 2)}x the vocabulary's"
        if m.reference_undefined_reason is None
        else "spread relative to the vocabulary undefined without one"
    )
    healthy = f"not collapsed (effective rank {_g(g.centered.effective_rank)}, {spread})"
    rsa = [c for c in checks if c.check is CheckName.RSA]
    measured = [
        lv.rsa.spearman for lv in m.levels if lv.rsa is not None and lv.rsa.spearman is not None
    ]
    warned = [str(c.level) for c in rsa if c.status == "warn"]
    if warned and len(warned) == len(rsa):
        r = f"~{sum(measured) / len(measured):.2f}" if measured else "undefined"
        return diagnosis(
            f"{healthy} but carries no structure (RSA {r} vs the codebooks, no level significant)",
            _likely_cause(report, m),
            sep=": ",
        )
    faint = [  # significant, but under a small effect: a trace, not the structure kept
        str(c.level)
        for c in rsa
        if c.status == "pass" and c.value is not None and c.value < SMALL_EFFECT
    ]
    kept = [str(c.level) for c in rsa if c.status == "pass" and str(c.level) not in faint]
    if warned:
        others = _kept_words(kept, faint)
        return diagnosis(
            f"{healthy}; level(s) {', '.join(warned)} carry no trace of the codebook's structure"
            f"{', ' + others if others else ''}; if those levels matter",
            _likely_cause(report, m),
            sep=": ",
        )
    if measured and len(measured) == len(m.levels) and not faint:
        return Diagnosis(
            f"healthy: {healthy}, and every level keeps the codebook's structure "
            f"(RSA {min(measured):.2f} to {max(measured):.2f})."
        )
    if measured and len(measured) == len(m.levels):
        return Diagnosis(
            f"{healthy}; every level carries a trace of the codebook's structure: "
            f"{_kept_words(kept, faint)} (RSA {min(measured):.2f} to {max(measured):.2f})."
        )
    reason = next((lv.rsa_skip_reason for lv in m.levels if lv.rsa is None), None)
    if not m.levels:
        reason = "levels unknown (no sidecar; token names do not match --level-pattern)"
    elif reason:  # the RSA checks' own line gives the reason in full, and the flag
        reason = reason.removesuffix(": RSA skipped").split(" (")[0]
    return Diagnosis(f"{healthy}; structure against the codebooks not measured: {reason}.")


def _kept_words(kept: list[str], faint: list[str]) -> str:
    """Which levels keep the codebook's structure and which carry only a faint trace of it
    (significant RSA under :data:`~geodiag.metrics.rsa.SMALL_EFFECT`)."""
    said = [f"level(s) {', '.join(kept)} keep it"] if kept else []
    if faint:
        said.append(
            f"level(s) {', '.join(faint)} only a faint trace (RSA under {SMALL_EFFECT:g}, "
            "a small effect)"
        )
    return ", ".join(said)


def verdict(report: CheckpointReport, gate: GateResult) -> Verdict:
    """Overall status, the one-sentence diagnosis (with the cause and the remedy it names),
    and a sentence per enabled check."""
    by_role = {m.role: m for m in report.matrices}
    advice = {m.role: _collapse_remedy(report, m) for m in report.matrices}
    shown = [c for c in gate.checks if not (c.status == "skip" and c.message == DISABLED)]
    checks = [
        CheckVerdict(
            c.name,
            c.matrix,
            c.status,
            c.value,
            c.threshold,
            check_sentence(c, by_role[c.matrix]),
        )
        for c in shown
    ]
    status = min((c.status for c in gate.checks), key=_ORDER.__getitem__, default="pass")
    status = "pass" if status == "skip" else status
    sentences, causes, remedies, said = [], [], [], set()
    for m in report.matrices:
        mine = [c for c in gate.checks if c.matrix == m.role]
        failed = [c for c in mine if c.status == "fail"]
        d = _collapse(m, failed, advice[m.role]) if failed else _structure(report, m, mine)
        if not failed:  # the structure sentence says RSA was not measured
            said |= {id(c) for c in mine if c.check is CheckName.RSA and c.status == "skip"}
        where = _where(m, len(report.matrices))
        sentences.append(where + d.sentence[0].upper() + d.sentence[1:])
        if not failed and m.untrained is not None and m.untrained.suspected:
            sentences.append(where + suspicion(m.untrained, m.n_new) + ".")
        causes += [where + d.cause] if d.cause else []
        remedies += [where + d.remedy] if d.remedy else []
    sentences += _skipped([c for c in shown if id(c) not in said])
    sentence = " ".join(s[0].upper() + s[1:] for s in sentences)
    return Verdict(
        status,
        sentence,
        checks,
        "; ".join(causes) or None,
        "; ".join(remedies) or None,
    )


def _skipped(shown: list[CheckResult]) -> list[str]:
    """The checks skipped, by why: not measured for want of an input (their own lines say
    which and the flag that gives it), or undefined on these rows."""
    skipped = [c for c in shown if c.status == "skip"]
    missing = sorted({c.name for c in skipped if "not measured" in c.message})
    undefined = sorted({c.name for c in skipped if c.name not in missing})
    out = []
    if missing:
        out.append(f"Not measured: {', '.join(missing)}.")
    if undefined:
        out.append(f"Skipped as undefined: {', '.join(undefined)}.")
    return out


def judge(report: CheckpointReport, cfg: GateConfig) -> GateResult:
    """The gate's result on ``report`` under ``cfg``, with its diagnosis: the sentence, the
    cause and the remedy (:func:`verdict`), for the JSON, the API and the CI files."""
    res = run_gate(report, cfg)
    v = verdict(report, res)
    res.verdict, res.cause, res.remedy = v.sentence, v.cause, v.remedy
    return res
