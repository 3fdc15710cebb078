"""``n_untrained``: new rows shown untrained, row by row (geodiag.metrics.untrained), by
proof (in a group of identical rows, at the vocabulary mean, all zero, a base padding row
left as it was) or a measured movement (barely moved since a reference); and the untrained
rows of any other token the chat template or --data feed. The block-level checks miss them
when trained rows sit beside them. Its rule, ``untrained_uses_to_fail``, says which count:
those something feeds (or may); the rest, which nothing can reach, warn. Rows a statistic
alone suspects (geodiag.analysis.evidence) warn too, naming the flag that settles them.
"""

from __future__ import annotations

import re

from geodiag.analysis.evidence import counted_kinds, suspicion, untrained_head
from geodiag.analysis.fed import fed_uses
from geodiag.analysis.findings import (
    ITEM_IDS,
    SHOWN_TOKENS,
    UNTRAINED,
    UNTRAINED_USES_TO_FAIL,
    counts_against,
)
from geodiag.analysis.reports import MatrixReport
from geodiag.gate.advice import GROUND, Advice, Diagnosis, diagnosis, g
from geodiag.gate.checks.unit import Check, CheckResult, Reading, Rule


def _value(m: MatrixReport) -> float | None:
    """The untrained rows that something feeds or may (the gate's rule at its default,
    UNTRAINED_USES_TO_FAIL; all of them when the row masks are gone), and the untrained
    rows of other tokens the template or the data feed (geodiag.analysis.fed)."""
    u = m.untrained
    if u is None:
        return None
    counted = u.counted(UNTRAINED_USES_TO_FAIL)
    fed = 0 if m.fed is None else m.fed.counted(UNTRAINED_USES_TO_FAIL)
    return (u.n_untrained if counted is None else int(counted.sum())) + fed


def untrained_kinds(u) -> list[str]:
    """How the counted untrained rows of ``u`` (an UntrainedRows) were found, as the
    messages say it (geodiag.analysis.evidence: words that match the evidence)."""
    return counted_kinds(u)


def token_uses(t) -> str:
    """``<c_17> (412x in train.jsonl, 3 item IDs)`` for a TokenFinding; the bare token when
    nothing is counted for it (its list says once why: :func:`_counted_part`)."""
    if not t.uses:
        return t.token
    parts = [
        f"{c} {'item ID' if c == 1 else 'item IDs'}"
        if name == ITEM_IDS
        else f"{'emitted by' if name.startswith('the chat template') else f'{c}x in'} {name}"
        for name, c in t.used_by.items()
    ]
    return f"{t.token} ({', '.join(parts)})"


def _listed(tokens: list, total: int) -> str:
    shown = [token_uses(t) for t in tokens[:SHOWN_TOKENS]]
    rest = total - len(shown)
    return ", ".join(shown) + (f" and {rest} more" if rest > 0 else "")


def _counted_part(counted: list, n_counted: int, n_unknown: int) -> str:
    """The counted untrained tokens: those something feeds, with their uses, and those no
    source speaks of, said once for all of them (not "(usage unknown)" after each)."""
    n_fed = n_counted - n_unknown
    fed = [t for t in counted if t.uses]
    unknown = [t for t in counted if not t.uses]
    if not n_unknown:
        return f"{n_counted} counted, as something feeds them: {_listed(fed, n_fed)}"
    unknown_why = f"no source says whether anything feeds them ({USAGE_HINT})"
    if not n_fed:
        return f"{n_counted} counted, as {unknown_why}: {_listed(unknown, n_unknown)}"
    return (
        f"{n_counted} counted: {n_fed} fed, {_listed(fed, n_fed)}; {n_unknown} for which "
        f"{unknown_why}, {_listed(unknown, n_unknown)}"
    )


def _read(m: MatrixReport, cfg) -> Reading:
    """The untrained new rows the rule counts (:func:`_new_untrained_tokens`), and the
    untrained rows of the tokens outside the new set that the chat template or --data
    feed (geodiag.analysis.fed) at least as often as the rule asks."""
    new = _new_untrained_tokens(m, cfg)
    fed = m.fed
    n_fed = 0 if fed is None else fed.counted(cfg.untrained_uses_to_fail)
    if not n_fed:
        return new
    assert fed is not None
    rule = cfg.untrained_uses_to_fail
    shown = [t for t in fed.tokens if not rule or t.uses >= rule][:SHOWN_TOKENS]
    rest = n_fed - len(shown)
    by = list(dict.fromkeys(name for t in shown for name in t.used_by))
    why = (
        f"{n_fed} token(s) outside the new set, fed by {' and '.join(by)}, have untrained "
        f"rows: {', '.join(fed_uses(t) for t in shown)}"
        + (f" and {rest} more" if rest > 0 else "")
        + "; set their rows (e.g. to the mean of the trained rows) and train them, or keep "
        "them out of the template and the data"
    )
    value = (new.value or 0.0) + n_fed
    return Reading(
        value,
        "; ".join(w for w in (new.why if new.value else "", why) if w),
        shown=f"{value:g}",
        warning=new.warning,
    )


def _new_untrained_tokens(m: MatrixReport, cfg) -> Reading:
    """The untrained rows the rule counts (GateConfig.untrained_uses_to_fail): those
    something feeds, or may; the rest, which nothing can reach, are a warning."""
    u = m.untrained
    if u is None:
        return Reading(None, "rows not measured one by one")
    rule = cfg.untrained_uses_to_fail
    counted_mask = u.counted(rule)
    if counted_mask is None:  # read back from JSON: the row masks are gone
        n_counted = u.n_untrained
    else:
        n_counted = int(counted_mask.sum())
    suspected = suspicion(u, m.n_new)  # statistics alone: a warning, never a count
    if u.untrained is None or not u.usage_sources:  # no usage known: every untrained row
        why = ""
        if u.untrained is not None:
            why = (
                f"{untrained_head(u, m.n_new)} ({'; '.join(untrained_kinds(u))}): "
                f"{u.untrained.listed()}; whether anything feeds them is unknown ({USAGE_HINT})"
            )
        if why and suspected:
            why += f"; besides, {suspected}"
        return Reading(float(n_counted), why, shown=f"{n_counted}", warning=suspected)
    untrained = [t for t in u.tokens if set(t.findings) & set(UNTRAINED)]
    counts = [bool(counts_against(t.uses, t.usage_known, rule)) for t in untrained]
    counted = sorted(
        (t for t, c in zip(untrained, counts, strict=True) if c), key=lambda t: -(t.uses or 0)
    )
    spared = [t for t, c in zip(untrained, counts, strict=True) if not c]
    n_spared = u.n_untrained - n_counted
    n_unknown = 0 if u.untrained_usage_unknown is None else u.untrained_usage_unknown.size
    n_unknown = min(n_unknown, n_counted)
    # Both numbers, and why they differ: "3 of 64 never left their init" read as if the
    # other 61 had, when all 64 did and 61 were spared.
    head = f"{untrained_head(u, m.n_new)} ({'; '.join(untrained_kinds(u))})"
    spare = (
        f"{n_spared} spared, as nothing feeds them ({spare_reason(u)}): {_listed(spared, n_spared)}"
    )
    parts = [head]
    parts += [_counted_part(counted, n_counted, n_unknown)] if n_counted else []
    parts += [spare] if n_spared else []
    said = "; ".join(parts)
    why = said if n_counted else ""  # said after a failure
    warning = ""
    if n_spared:  # a pass warns of them
        remedy = (
            "re-fit the codebook so that every code is used, or drop those tokens"
            if ITEM_IDS in u.usage_sources
            else "drop them from the vocabulary, or leave them: no input reaches them"
        )
        warning = f"{said}; the {n_spared} spared cannot matter: {remedy}"
    if suspected:
        why += f"; besides, {suspected}" if why else ""
        warning = f"{warning}; besides, {suspected}" if warning else suspected
    return Reading(float(n_counted), why, shown=f"{n_counted}", warning=warning)


# What to pass so that the gate fails only on the untrained tokens that matter.
USAGE_HINT = "--data FILE counts them in your training data"


def spare_reason(u) -> str:
    """Why nothing feeds the spared tokens, from the sources counted."""
    said = []
    if ITEM_IDS in u.usage_sources:
        said.append("no item's ID uses their codes")
    others = [s for s in u.usage_sources if s != ITEM_IDS]
    if others:
        said.append("absent from " + " and ".join(others))
    return "; ".join(said)


def _untrained_phrase(m: MatrixReport) -> str:
    """ "k of n new tokens never left their init (how): names", from the row findings."""
    u = m.untrained
    assert u is not None and u.untrained is not None
    how = untrained_kinds(u)
    return f"{untrained_head(u, m.n_new, 'tokens')} ({'; '.join(how)}): {u.untrained.listed(counted=True)}"


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
    if covers(u.unchanged_padding):
        return "padding"
    if all(_RESERVED.search(t) for t in u.untrained.tokens):
        return "reserved"
    return None


# Causes that are no init at all: the rows were never written, or never set after adding
# the tokens. No resize option produced them, so no resize option is the remedy.
_NO_INIT = {
    "zero": "they are all zero: a zero init, rows a save never wrote (a sharded save "
    "without gathering), or slots the base left at zero",
    "padding": "they are the base's padding rows past its tokenizer, unchanged, which "
    "resize_token_embeddings leaves as they were when the matrix is already large enough "
    "(no resize, so no init ran on them)",
    "reserved": "they are the base's reserved slots, rows its pretraining never trained "
    "(no resize happened)",
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
        return diagnosis(finding, advice)
    remedy = _UNTRAINED_REMEDY[cause]
    return Diagnosis(f"{finding}: {remedy}.", _SHARED_CAUSE[cause], remedy)


def _sentence(c: CheckResult, m: MatrixReport) -> str:
    u = m.untrained
    if u is not None and u.untrained is None and c.status == "warn" and u.suspected:
        return f"no new row is untrained by proof or a measured movement; {suspicion(u, m.n_new)}."
    if c.status == "pass" or u is None or u.untrained is None:
        return f"no new row is still at its init (none within {g(u.tolerance if u else None)} of another row or of the vocabulary mean)."
    return _untrained_finding(m)


def _rank(m: MatrixReport) -> int:
    """Rows no init ran on explain a collapse first (no init option to blame); other
    untrained rows come after the point and rank checks."""
    return 0 if _untrained_cause(m) in _NO_INIT else 3


def _explain(m: MatrixReport, failed: list[CheckResult], advice: Advice) -> Diagnosis | None:
    if _untrained_cause(m) in _NO_INIT:
        return _untrained_diagnosis(m, advice)
    if m.untrained is not None and m.untrained.untrained:
        return _untrained_diagnosis(m, advice)
    return None


CHECK = Check(
    name="n_untrained",
    field="max_untrained_tokens",  # the flag kept its older name
    direction="max",
    default=0,
    count=True,
    help="New rows shown untrained, row by row: by proof (in a group of identical rows, at "
    "the vocabulary mean, all zero, a base padding row left as it was) or a measured movement "
    "(barely moved since --reference); and untrained rows of any other token the chat "
    "template or --data feed. Rows only a statistic suspects (ranked with the rows the files "
    "mark unused, an isotropic set like an initializer's draw, norms like the padding rows') "
    "warn, naming the flag that settles them",
    metavar="K",
    scope="row",
    value=_value,
    read=_read,
    sentence=_sentence,
    explain=_explain,
    rank=_rank,
    collapse=True,
    rules=(
        Rule(
            field="untrained_uses_to_fail",
            default=UNTRAINED_USES_TO_FAIL,
            count=True,
            help="An untrained token counts against --max-untrained-tokens when the item IDs, "
            "--data or the chat template use it at least this often, or when no source says; "
            "the others warn (0: every untrained token counts)",
            metavar="N",
        ),
    ),
)
