"""Cause and remedy of a gate result, in the terms of someone who just ran an init.

The gate (:mod:`geodiag.gate.checks`) decides pass / warn / fail; this module only explains
its decisions: one diagnosis per checkpoint, which carries the remedy once, and one
finding per gate check, which states what was measured and no remedy (a card whose six
check lines repeat one remedy reads as six problems). Remedies speak the language of the stack that wrote the checkpoint
(:mod:`geodiag.io.stack`): the option that produced a collapse and its alternative in
transformers, Unsloth, LLaMA-Factory or PEFT, with gti as one option among them. A gti
checkpoint's sidecar provenance (strategy, grounding steps) shapes the advice.

The numbers also fingerprint the common inits: identical rows (an exact mean: Unsloth's
``add_new_tokens`` default, ``gti init --strategy mean``); a spread ~3e-5 of the
vocabulary's (transformers' ``mean_resizing``: N(mean, 1e-9 Sigma), sqrt(1e-9) = 3.2e-5);
an isotropic spread of ~1 in embedding units (LLaMA-Factory's ``noise_init``: the mean
plus N(0, 1/d) per coordinate, so E||x - mean||^2 = d * 1/d = 1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from geodiag.analysis.reports import CheckpointReport, MatrixReport
from geodiag.analysis.values import CheckName
from geodiag.gate.checks import (
    DISABLED,
    CheckResult,
    GateConfig,
    GateResult,
    run_gate,
    untrained_kinds,
)

GTI = "`gti init --strategy gti`"
GROUND = f"ground them with {GTI}"
_ORDER = {"fail": 0, "warn": 1, "pass": 2, "skip": 3}
PAPER_GROUNDING = "8,000 steps x 128 examples"

# What produced a collapse, by fingerprint (module docstring).
_CAUSE = {
    "identical": 'an exact mean init (Unsloth\'s `add_new_tokens` default `method="mean"`, '
    "`gti init --strategy mean`, or code copying the mean)",
    "mean_resizing": "transformers' `resize_token_embeddings(..., mean_resizing=True)` "
    "(the default), which draws new rows from N(mean, 1e-9 Sigma)",
    "unit_noise": "LLaMA-Factory's default `init_special_tokens: noise_init` "
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


def fingerprint(m: MatrixReport) -> str | None:
    """Which common init the new rows look like: identical, mean_resizing, unit_noise, None."""
    g = m.new
    if g.spread == 0:
        return "identical"
    if g.spread_relative is not None and 1e-5 <= g.spread_relative <= 1e-4:
        return "mean_resizing"
    expected = ((m.n_new - 1) / m.n_new) ** 0.5  # RMS distance to the sample mean
    if m.n_new > 1 and abs(g.spread - expected) < 0.1 and g.centered.effective_rank_ratio > 0.5:
        return "unit_noise"
    return None


def _gti_provenance(provenance: dict) -> dict:
    """The init's provenance: the sidecar's own, or the one an SFT kept under ``init``."""
    init = provenance.get("init")
    return init if isinstance(init, dict) else provenance


@dataclass(frozen=True)
class Advice:
    """Why the rows look as they do (None: nothing the files tell), and what to do."""

    cause: str | None
    remedy: str | None

    @property
    def text(self) -> str:
        """Both, as a sentence says them: "cause; remedy"."""
        return "; ".join(s for s in (self.cause, self.remedy) if s)


def _collapse_remedy(report: CheckpointReport, m: MatrixReport) -> Advice:
    """What produced this collapse, and what to do instead, in the user's stack."""
    stack = report.stack.get("name", "unknown")
    fp = fingerprint(m)
    if stack == "gti":
        init = _gti_provenance(report.provenance)
        strategy = init.get("init_strategy")
        if strategy in ("mean", "mean-noise"):
            return Advice(
                f"the sidecar says `gti init --strategy {strategy}`",
                f"ground them with {GTI}, or start each from its item's text with "
                "`--strategy description-mean`",
            )
        if strategy == "gti":
            return Advice(
                f"a gti init grounded for only {init.get('step', '?')} steps (the paper grounds "
                f"{PAPER_GROUNDING}) has not left its starting point",
                "ground longer (`--steps`)",
            )
        return Advice(None, f"{GROUND} or check that your init ran")
    cause = _CAUSE.get(fp or "")
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


@dataclass(frozen=True)
class Diagnosis:
    """One matrix's diagnosis: the sentence, and the cause and remedy it names (the same
    strings: the sentence is made of them)."""

    sentence: str
    cause: str | None = None
    remedy: str | None = None


def _diagnosis(head: str, advice: Advice, sep: str = "; ") -> Diagnosis:
    """``head``, then the advice: "head; cause; remedy."."""
    rest = advice.text
    return Diagnosis(f"{head}{sep}{rest}." if rest else f"{head}.", advice.cause, advice.remedy)


def _g(x: float | None, digits: int = 3) -> str:
    return "undefined" if x is None else f"{x:.{digits}g}"


def _where(m: MatrixReport, n_matrices: int) -> str:
    """Which matrix a sentence is about, when there is more than one (an untied head)."""
    if n_matrices < 2:
        return ""
    return f"{'output head' if m.role == 'output' else 'input embedding'} ({m.tensor}): "


def _rsa_sentence(c: CheckResult, m: MatrixReport) -> str:
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
        return f"level {level}: RSA {r:.3f} (p = {_g(p)}), no trace of the codebook."
    return f"level {level} keeps the codebook's structure: RSA {r:.3f} (p = {_g(p)})."


def check_sentence(c: CheckResult, m: MatrixReport) -> str:
    """The finding of one gate check, in one sentence. No remedy: the card's diagnosis
    (:func:`verdict`'s sentence) carries it, once."""
    if c.check is CheckName.RSA:
        return _rsa_sentence(c, m)
    if c.status == "skip":
        return c.message if c.message.endswith(".") else c.message + "."
    g, v, t = m.new, c.value, c.threshold
    k = min(m.n_new, m.dim)
    ok = c.status == "pass"
    if c.check in (CheckName.EFFECTIVE_RANK_RATIO, CheckName.EFFECTIVE_RANK):
        erank = g.centered.effective_rank
        if erank == 0:
            return "the rows are identical: rank 0 around their mean."
        ratio = c.check is CheckName.EFFECTIVE_RANK_RATIO
        shown = f"ratio {_g(v)}" if ratio else f"rank {_g(v)}"
        if ok:
            return f"{erank:.3g} effective directions of {k} possible ({shown} >= {t:g})."
        return (
            f"only {erank:.3g} effective direction(s) of {k} ({shown} < {t:g}): a line or a thin "
            "subspace."
        )
    if c.check is CheckName.SPREAD_RELATIVE:
        if v is None:
            return f"spread relative to the vocabulary undefined ({c.message})."
        if ok:
            return f"spread {v:.3g}x the vocabulary's (>= {t:g})."
        return f"spread only {v:.2g}x the vocabulary's (< {t:g}): one point, as after mean init."
    if c.check is CheckName.N_UNTRAINED:
        u = m.untrained
        if ok or u is None or u.untrained is None:
            return f"no new row is still at its init (none within {_g(u.tolerance if u else None)} of another row or of the vocabulary mean)."
        return _untrained_finding(m)
    if c.check is CheckName.VOCABULARY_DISAGREEMENTS:
        if ok:
            return (
                "the tokenizer, config.json, the matrices and any adapter agree on the vocabulary."
            )
        return f"the files disagree about the vocabulary ({c.message})."
    if c.check is CheckName.NORM_RATIO:
        if ok:
            return f"the longest new row is {v:.3g}x the longest original row (<= {t:g})."
        return (
            f"the longest new row is {v:.3g}x the longest original row (> {t:g}): logits scale "
            "with the norm, so the model will emit it everywhere."
        )
    if c.check is CheckName.MEAN_PAIRWISE_COSINE:
        if ok:
            return (
                f"mean pairwise cosine {v:.3g} (<= {t:g}): the rows point in different directions."
            )
        return (
            f"mean pairwise cosine {v:.3g} (> {t:g}): all point the same way, as after mean init."
        )
    return c.message


def _untrained_phrase(m: MatrixReport) -> str:
    """ "k of n new tokens never left their init (how): names", from the row findings."""
    u = m.untrained
    assert u is not None and u.untrained is not None
    how = untrained_kinds(u)
    return (
        f"{u.n_untrained} of {m.n_new} new tokens never left their init ({'; '.join(how)}): "
        f"{u.untrained.listed(counted=True)}"
    )


# Names of the slots a base reserves and never trains (Llama-3's
# <|reserved_special_token_N|>, Gemma's <unusedN>): rows pretraining left as initialized.
_RESERVED = re.compile(r"reserved|unused", re.IGNORECASE)


def _untrained_cause(m: MatrixReport) -> str | None:
    """The cause all untrained tokens share: "dead_codes", "barely_moved", "zero",
    "padding" (the base's padding rows, unchanged or alike), "reserved" (the base's
    reserved slots, by name), or None."""
    u = m.untrained
    if u is None or u.untrained is None:
        return None

    def covers(group) -> bool:
        return group is not None and group.size == u.n_untrained

    if covers(u.dead_codes):
        return "dead_codes"
    if covers(u.barely_moved):
        return "barely_moved"
    if covers(u.zero):
        return "zero"
    if covers(u.unchanged_padding) or covers(u.like_padding):
        return "padding"
    if covers(u.initializer_draw):
        return "draw"
    if covers(u.under_trained) and not all(_RESERVED.search(t) for t in u.untrained.tokens):
        return "under_trained"
    if all(_RESERVED.search(t) for t in u.untrained.tokens):
        return "reserved"
    return None


# Causes that are no init at all: the rows were never written, or never set after adding
# the tokens. No resize option produced them, so no resize option is the remedy.
_NO_INIT = {
    "zero": "they are all zero: a zero init, rows a save never wrote (a sharded save "
    "without gathering), or slots the base left at zero",
    "padding": "they sit on the base's padding rows past its tokenizer, which "
    "resize_token_embeddings leaves as they were when the matrix is already large enough "
    "(no resize, so no init ran on them)",
    "reserved": "they are the base's reserved slots, rows its pretraining never trained "
    "(no resize happened)",
    "draw": "they are an initializer's draw (isotropic, at the model's initializer or noise "
    "around the vocabulary mean): nothing trained them",
    "under_trained": "they sit with the rows the files mark unused, as close to those rows' "
    "mean as the rows themselves (Land & Bartolo's under-trained indicator): rows "
    "pretraining never trained",
}


def _untrained_finding(m: MatrixReport) -> str:
    """Which tokens never left their init, and the cause they share (no remedy)."""
    u = m.untrained
    assert u is not None
    cause = _untrained_cause(m)
    if cause is not None:
        return f"{_untrained_phrase(m)}; {_SHARED_CAUSE[cause]}."
    rest = ""
    if u.two_populations:
        rest = f" (the other {u.n_trained} rows are distinct: trained before, or by you)"
    return f"{_untrained_phrase(m)}{rest}."


# What to do about untrained tokens that share a cause (the init's remedy otherwise).
_UNTRAINED_REMEDY = {
    "dead_codes": "drop those tokens, re-fit the codebook, or allow them with "
    "--max-untrained-tokens",
    "barely_moved": "train longer, or check that the training data uses them",
    **dict.fromkeys(
        _NO_INIT,
        "set each of those rows after adding the tokens and before training (e.g. the mean "
        f"of its description's subword embeddings), or {GROUND}; then check that the saved "
        "file holds them",
    ),
}


# The cause all the untrained tokens share, as their finding says it.
_SHARED_CAUSE = {
    "dead_codes": "each is a code no item uses (a dead code), so no training example reaches it",
    "barely_moved": "training has not reached them since the reference (their codes are rare "
    "in the data, or the run is short)",
    **_NO_INIT,
}


def _untrained_diagnosis(m: MatrixReport, advice: Advice) -> Diagnosis:
    """Why the untrained tokens are untrained, and what to do: the cause all of them share
    (dead codes, barely moved since the reference), else the init's advice."""
    finding = _untrained_finding(m)[:-1]
    cause = _untrained_cause(m)
    if cause is None:
        return _diagnosis(finding, advice)
    remedy = _UNTRAINED_REMEDY[cause]
    return Diagnosis(f"{finding}: {remedy}.", _SHARED_CAUSE[cause], remedy)


def _collapse(m: MatrixReport, failed_checks: list[CheckResult], advice: Advice) -> Diagnosis:
    """The diagnosis of a failed matrix, most specific cause first."""
    n, g = m.n_new, m.new
    failed = {c.check for c in failed_checks}
    if _untrained_cause(m) in _NO_INIT and CheckName.N_UNTRAINED in failed:
        return _untrained_diagnosis(m, advice)  # no init ran: no init option to blame
    if CheckName.SPREAD_RELATIVE in failed or CheckName.MEAN_PAIRWISE_COSINE in failed:
        if g.spread == 0:
            head = (
                f"all {n} new tokens are the same vector: mean initialization (or an init that "
                "never ran)"
            )
        elif CheckName.SPREAD_RELATIVE in failed and g.spread_relative is not None:
            head = (
                f"all {n} new tokens lie within {g.spread:.1g} (RMS) of one point, "
                f"{g.spread_relative:.1g}x the spread of the original vocabulary: mean "
                "initialization, perhaps with small noise"
            )
        else:
            head = (
                f"the {n} new tokens all point the same way (mean pairwise cosine "
                f"{_g(g.mean_pairwise_cosine)}): a shared offset dominates them, as after mean "
                "initialization"
            )
        return _diagnosis(head, advice)
    if failed & {CheckName.EFFECTIVE_RANK_RATIO, CheckName.EFFECTIVE_RANK}:
        if g.centered.effective_rank == 0:
            return _diagnosis(
                f"all {n} new tokens are the same vector (rank 0 around their mean)", advice
            )
        return _diagnosis(
            f"the {n} new tokens span only {g.centered.effective_rank:.2g} effective "
            "direction(s) around their mean",
            Advice(
                "they lie on a line or in a thin subspace (e.g. multiples of one vector)",
                f"give each token its own starting point, or {GROUND}",
            ),
            sep=": ",
        )
    if CheckName.N_UNTRAINED in failed and m.untrained is not None and m.untrained.untrained:
        return _untrained_diagnosis(m, advice)
    if CheckName.NORM_RATIO in failed:
        return _diagnosis(
            f"the longest new row is {_g(m.norm_ratio)}x the longest original row: the model "
            "will emit it everywhere",
            Advice(None, "rescale the new rows to the vocabulary's norms"),
        )
    if CheckName.VOCABULARY_DISAGREEMENTS in failed:
        return Diagnosis(
            "the checkpoint's files disagree about the vocabulary; each finding below "
            "names its remedy."
        )
    rsa_failed = sorted(str(c.level) for c in failed_checks if c.check is CheckName.RSA)
    if rsa_failed:
        return _diagnosis(
            f"level(s) {', '.join(rsa_failed)} do not reproduce the codebook's structure",
            Advice(None, f"{GROUND} before fine-tuning"),
        )
    return Diagnosis("see the failed checks below.")


INHERIT = f"{GROUND} so they inherit the codebook's structure"


def _likely_cause(report: CheckpointReport, m: MatrixReport) -> Advice:
    """Why rows that are not collapsed carry no structure, in the checkpoint's own terms."""
    stack = report.stack.get("name", "unknown")
    if stack == "gti":
        init = _gti_provenance(report.provenance)
        strategy = init.get("init_strategy") or init.get("strategy")
        stage = report.provenance.get("stage")
        if strategy == "gti":
            sids = init.get("sids_provenance") or {}
            source = (
                f"{sids.get('encoder', 'content')} embeddings of {init.get('data', 'the catalog')}"
            )
            return Advice(
                f"a gti init grounded for {init.get('step', '?')} steps, far short of the paper's "
                f"{PAPER_GROUNDING}",
                "ground longer (`gti init --strategy gti --steps N`), and check that the item "
                f"descriptions carry what the codebook encodes (the SIDs come from {source}; "
                "grounding can only transfer what the texts say)",
            )
        if strategy == "mean" and stage not in (None, "init"):
            return Advice(
                "training did not recover the structure the mean initialization erased",
                f"{GROUND} before SFT",
            )
        if strategy == "random":
            return Advice("as expected of a random initialization", INHERIT)
        return Advice("a random initialization looks like this", INHERIT)
    if fingerprint(m) == "unit_noise" or stack == "llamafactory":
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
        if m.reference is not None
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
        return _diagnosis(
            f"{healthy} but carries no structure (RSA {r} vs the codebooks, no level significant)",
            _likely_cause(report, m),
            sep=": ",
        )
    if warned:
        return _diagnosis(
            f"{healthy}; level(s) {', '.join(warned)} carry no trace of the codebook's structure, "
            "the others do; if those levels matter",
            _likely_cause(report, m),
            sep=": ",
        )
    if measured and len(measured) == len(m.levels):
        return Diagnosis(
            f"healthy: {healthy}, and every level keeps the codebook's structure "
            f"(RSA {min(measured):.2f} to {max(measured):.2f})."
        )
    reason = next((lv.rsa_skip_reason for lv in m.levels if lv.rsa is None), None)
    if not m.levels:
        reason = "levels unknown (no sidecar; token names do not match --level-pattern)"
    elif reason:  # the RSA checks' own line gives the reason in full, and the flag
        reason = reason.removesuffix(": RSA skipped").split(" (")[0]
    return Diagnosis(f"{healthy}; structure against the codebooks not measured: {reason}.")


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
