"""The CI gate: thresholds over a :class:`CheckpointReport`, pass / warn / fail per check.

Collapse has several faces, and no single number sees them all (docs/gate.md, "What the
gate catches"):
- rows set exactly to the mean: centered rank 0, spread 0, mean cosine 1;
- the mean plus tiny noise (``mean_resizing``): the *centered* effective rank is
  high, because the noise is full-rank, but the spread relative to the vocabulary
  is ~1e-5 and the mean cosine ~1. Only the scale-aware checks catch it;
- rows on a line: spread and mean cosine can look normal, the centered effective
  rank is ~1.
Each default therefore fails at least one check on each collapsed form, and a
random or grounded init passes them all.

The checks are one table: each field of :class:`GateConfig` is a row, declared with
:func:`threshold` (default, help, what it reads, ...), and :data:`CHECKS` holds them as
:class:`Check` objects. The ``geodiag check`` flags, the keywords of ``geodiag.check``,
the Trainer callback's collapse test, the report's threshold lines, the GitHub Action's
inputs and the README's table all derive from it (action.yml and the README are
rendered by :mod:`tools.gate_docs`). Adding a check is one field here.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, get_args, get_type_hints

from geodiag.analysis.audit import AUDIT_KINDS
from geodiag.analysis.fed import fed_uses
from geodiag.analysis.findings import (
    ITEM_IDS,
    SHOWN_TOKENS,
    UNTRAINED,
    UNTRAINED_USES_TO_FAIL,
    counts_against,
)
from geodiag.analysis.reports import CheckpointReport, MatrixReport
from geodiag.analysis.values import VALUES, CheckName, rsa_by_level, shown_name
from geodiag.errors import InputError
from geodiag.jsonio import JSON_SKIP, read_document
from geodiag.settings import THRESHOLDS as THRESHOLDS_PANEL
from geodiag.settings import setting


@dataclass
class CheckResult:
    name: str = field(init=False)  # as shown: the check's, or "rsa[<level>]" (shown_name)
    check: CheckName = field(metadata={JSON_SKIP: True})  # the name says it in the JSON
    matrix: str  # "input" | "output"
    status: str  # "pass" | "warn" | "fail" | "skip"
    value: float | None
    threshold: float | None
    message: str
    level: str | None = field(default=None, metadata={JSON_SKIP: True})  # a level check's

    def __post_init__(self) -> None:
        self.name = shown_name(self.check, self.level)


DISABLED = "check disabled"  # the message of a check whose threshold is None


@dataclass(frozen=True)
class Reading:
    """What a check reads off one matrix: the value, and what to say about it."""

    value: float | None
    why: str = ""  # said after a failure; when value is None, why it is undefined
    shown: str | None = None  # the value as the message prints it (default: 4 digits)
    # False: undefined for want of something the rows do not owe (a vocabulary to compare
    # with): skipped, where an undefined floor otherwise fails.
    measurable: bool = True
    # Said when the value passes but something beside it deserves a look: the result is
    # then a warning (untrained tokens that nothing feeds).
    warning: str = ""


def format_value(x: float | None) -> str:
    return "undefined" if x is None else f"{x:.4g}"


def _effective_rank_ratio(m: MatrixReport, cfg: GateConfig) -> Reading:
    return Reading(
        VALUES[CheckName.EFFECTIVE_RANK_RATIO](m),
        f"the {m.n_new} new rows span few directions around their mean (collapsed, or on a line)",
    )


def _effective_rank(m: MatrixReport, cfg: GateConfig) -> Reading:
    return Reading(
        VALUES[CheckName.EFFECTIVE_RANK](m),
        f"the {m.n_new} new rows span few directions around their mean",
    )


def _spread_relative(m: MatrixReport, cfg: GateConfig) -> Reading:
    if m.reference is None:
        return Reading(None, str(m.reference_undefined_reason), measurable=False)
    return Reading(
        VALUES[CheckName.SPREAD_RELATIVE](m),
        f"the {m.n_new} new rows sit within a tiny ball compared with the original "
        "vocabulary (mean initialization, with or without small noise)",
    )


def _mean_pairwise_cosine(m: MatrixReport, cfg: GateConfig) -> Reading:
    cos = VALUES[CheckName.MEAN_PAIRWISE_COSINE](m)
    if cos is None:  # two rows or more (one row is a block check's skip): a zero row
        return Reading(None, "a new row has zero norm, so its direction is undefined")
    return Reading(cos, f"the {m.n_new} new rows all point the same way (mean initialization?)")


def untrained_kinds(u) -> list[str]:
    """How the untrained rows of ``u`` (an UntrainedRows) were found, as the messages say it."""
    return [
        k
        for k in (
            f"{u.n_groups} group(s) of rows identical within {u.tolerance:.2g}"
            if u.n_groups
            else "",
            "at the vocabulary mean" if u.at_vocabulary_mean else "",
            f"{u.zero.size} all zero" if u.zero else "",
            "unchanged padding rows of the base" if u.unchanged_padding else "",
            f"{u.like_padding.size} distributed like the {u.padding.n_padding} unused padding "
            f"rows past the tokenizer (KS p = {u.padding.p_new_vs_padding:.2g}; --base BASE "
            "compares each row with the base's)"
            if u.like_padding and u.padding
            else "",
            f"{u.barely_moved.size} barely moved since the reference"
            + (f": {u.movement.reference}" if u.movement and u.movement.reference else "")
            if u.barely_moved
            else "",
            f"{u.under_trained.size} as close to the {u.indicator.n_unused} rows the files mark "
            f"unused as those rows are to each other ({u.indicator.indicator} past "
            f"{u.indicator.cut:.3g})"
            if u.under_trained and u.indicator
            else "",
            f"{u.initializer_draw.size} an initializer's draw ({u.draw.kind}: isotropic, "
            f"p = {u.draw.p_isotropic:.2g}; --reference INIT settles it)"
            if u.initializer_draw and u.draw
            else "",
        )
        if k
    ]


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


def _n_untrained(m: MatrixReport, cfg: GateConfig) -> Reading:
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


def _new_untrained_tokens(m: MatrixReport, cfg: GateConfig) -> Reading:
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
    if u.untrained is None or not u.usage_sources:  # no usage known: every untrained row
        why = ""
        if u.untrained is not None:
            why = (
                f"{u.n_untrained} of {m.n_new} new rows never left their init "
                f"({'; '.join(untrained_kinds(u))}): {u.untrained.listed()}; whether anything "
                f"feeds them is unknown ({USAGE_HINT})"
            )
        return Reading(float(n_counted), why, shown=f"{n_counted}")
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
    head = (
        f"{u.n_untrained} of {m.n_new} new rows never left their init "
        f"({'; '.join(untrained_kinds(u))})"
    )
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


def _norm_ratio(m: MatrixReport, cfg: GateConfig) -> Reading:
    r = VALUES[CheckName.NORM_RATIO](m)
    if r is None:
        return Reading(None, "no original vocabulary to compare the new rows' norms with")
    return Reading(
        r,
        "the longest new row is far longer than any original row: the model "
        "will emit it everywhere",
    )


def _vocabulary_disagreements(report: CheckpointReport) -> Reading:
    found = [f for f in report.integrity if f.kind in AUDIT_KINDS]
    why = "; ".join(f"{f.kind}: {f.message}" for f in found)
    return Reading(float(len(found)), why, shown=str(len(found)))


def _rsa_levels(m: MatrixReport, threshold: float | None) -> list[CheckResult]:
    """One result per level. Off (the default), a low RSA warns: a random init has no
    structure but is not collapsed."""
    out, values = [], rsa_by_level(m)
    for lv in m.levels:
        name = shown_name(CheckName.RSA, lv.name)
        if lv.rsa is None:
            status = "fail" if threshold is not None else "skip"
            # The reason is often the checkpoint's note ("...: RSA skipped"): said once here.
            reason = (lv.rsa_skip_reason or "").removesuffix(": RSA skipped")
            msg = f"{name} not measured: {reason}"
            out.append(CheckResult(CheckName.RSA, m.role, status, None, threshold, msg, lv.name))
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
        elif p is not None and p >= 0.05:
            status = "warn"
            # The remedy depends on how the rows were made: the verdict gives it (verdict.py).
            msg = f"{name} {r:.3f} (p={p:.3g}): the rows carry no trace of the codebook's structure"
        else:
            status, msg = "pass", f"{name} {r:.3f} (p={format_value(p)})"
        out.append(CheckResult(CheckName.RSA, m.role, status, r, threshold, msg, lv.name))
    return out


# What a check judges: the new rows together (undefined for a single row), each row, each
# level (one result per level), the checkpoint's files (one result, on the input matrix). GateConfig lists its checks in this order (a test checks).
SCOPES = ("block", "row", "level", "checkpoint")
ROW = "geodiag.gate.check"  # field metadata key of a row of the table


def default_text(default: float | None) -> str:
    """A default as the help, the README and the action show it."""
    return "off" if default is None else f"{default:g}"


def threshold(
    default: float | None,
    *,
    help: str,
    metavar: str = "X",
    scope: str = "block",
    read: Callable[[MatrixReport, GateConfig], Reading] | None = None,
    read_levels: Callable[[MatrixReport, float | None], list[CheckResult]] | None = None,
    read_report: Callable[[CheckpointReport], Reading] | None = None,
    collapse: bool = False,
    label: str | None = None,
    check: CheckName | None = None,
) -> Any:
    """A GateConfig field: one check. The name says what it compares: ``min_<check>``
    (value >= threshold passes) or ``max_<check>``; ``check`` names the check when the
    flag kept an older name (``--min-spread-ratio`` judges ``spread_relative``: the checks
    took the names of the figures they read, the flags and config keys stayed).

    help: one line, for the flag, the action input and the README row (the default is
    added to it). read: the value of a block or row check; read_levels: the results of
    a level check. collapse: failing it means the rows are (still) collapsed; the Trainer
    callback tests it whenever its snapshot records the value. label: the title of its
    panel in the report's plots over training (None: no panel).
    """
    wanted = {"level": "read_levels", "checkpoint": "read_report"}.get(scope, "read")
    readers = (("read", read), ("read_levels", read_levels), ("read_report", read_report))
    given = [k for k, v in readers if v is not None]
    if scope not in SCOPES or given != [wanted]:
        raise ValueError(f"a {scope!r} check takes {wanted}, and only {wanted}")
    option = setting(
        default, help=f"{help} [{default_text(default)}].", cli_default=None, metavar=metavar
    )
    row = dict(
        help=help,
        metavar=metavar,
        scope=scope,
        read=read,
        read_levels=read_levels,
        read_report=read_report,
        collapse=collapse,
        label=label,
        check=check,
    )
    return field(default=default, metadata={**option.metadata, ROW: row})


RULE = "geodiag.gate.rule"  # field metadata key of a rule (a setting of another check)


def rule(default: float | None, *, help: str, metavar: str = "X") -> Any:
    """A GateConfig field that is no check of its own: a setting another check reads
    (a flag, a config key and an action input like the thresholds)."""
    option = setting(
        default, help=f"{help} [{default_text(default)}].", cli_default=None, metavar=metavar
    )
    return field(
        default=default, metadata={**option.metadata, RULE: dict(help=help, metavar=metavar)}
    )


@dataclass(frozen=True)
class GateConfig:
    """Thresholds, one per check; ``None`` disables a check. The table of the gate. A
    count is an ``int``: its flag takes a whole number."""

    HELP_PANEL = THRESHOLDS_PANEL

    # Rows on a line score ~1/min(n, d).
    min_effective_rank_ratio: float | None = threshold(
        0.1,
        help="Centered effective rank / min(n, d)",
        read=_effective_rank_ratio,
        collapse=True,
        label="effective-rank ratio (centered)",
    )
    # Off by default: it depends on n.
    min_effective_rank: float | None = threshold(
        None, help="Centered effective rank, absolute", read=_effective_rank, collapse=True
    )
    # Mean + 1e-9*Sigma noise scores ~3e-5; a random init matched to the vocabulary ~1.
    min_spread_ratio: float | None = threshold(
        0.05,
        help="RMS spread of the new rows / that of an equal-size sample of original rows",
        metavar="S",
        read=_spread_relative,
        check=CheckName.SPREAD_RELATIVE,
        collapse=True,
        label="spread / vocabulary spread",
    )
    # Mean init (with or without noise) is ~1.
    max_mean_cosine: float | None = threshold(
        0.9,
        help="Mean pairwise cosine of the new rows",
        metavar="C",
        read=_mean_pairwise_cosine,
        check=CheckName.MEAN_PAIRWISE_COSINE,
        collapse=True,
        label="mean pairwise cosine",
    )
    # Found row by row (geodiag.metrics.untrained). The block-level checks miss them when
    # trained rows sit beside them.
    max_untrained_tokens: int | None = threshold(
        0,
        help="New rows still at their init, found row by row: in a group of identical "
        "rows, at the vocabulary mean, all zero, a base padding row left as it was, or "
        "barely moved since --reference; and untrained rows of any other token the chat "
        "template or --data feed",
        metavar="K",
        scope="row",
        read=_n_untrained,
        check=CheckName.N_UNTRAINED,
        collapse=True,
    )
    # The rule of max_untrained_tokens: which untrained rows count. Not a check of its own.
    untrained_uses_to_fail: int | None = rule(
        UNTRAINED_USES_TO_FAIL,
        help="An untrained token counts against --max-untrained-tokens when the item IDs, "
        "--data or the chat template use it at least this often, or when no source says; "
        "the others warn (0: every untrained token counts)",
        metavar="N",
    )
    # Logits scale with the norm: a row 10x longer than any token the model knows wins
    # every softmax it enters.
    max_norm_ratio: float | None = threshold(
        10.0,
        help="Longest new row / longest original row (logits scale with the norm)",
        metavar="R",
        scope="row",
        read=_norm_ratio,
    )
    # Off by default: a random init has no structure but is not collapsed; the report
    # says so as a warning.
    min_rsa: float | None = threshold(
        None,
        help="Spearman RSA against the codebooks, every level",
        metavar="R",
        scope="level",
        read_levels=_rsa_levels,
        label="RSA against the codebook, per level",
    )
    # The files disagree about the vocabulary (geodiag.analysis.audit): a loader refuses
    # them, or the model built from them cannot read, emit or train some new tokens.
    max_vocabulary_disagreements: int | None = threshold(
        0,
        help="Findings of the vocabulary audit: tokenizer, config.json, embedding, head, "
        "adapter indices and GGUF token types that disagree",
        metavar="K",
        scope="checkpoint",
        read_report=_vocabulary_disagreements,
    )


@dataclass(frozen=True)
class Setting:
    """A field of :class:`GateConfig` as the command line, the config file, the action and
    the docs show it: a check (:class:`Check`) or a rule (:class:`Rule`)."""

    field: str  # the GateConfig field, e.g. "min_spread_ratio"
    default: float | None
    help: str
    metavar: str

    @property
    def flag(self) -> str:
        return "--" + self.field.replace("_", "-")

    @property
    def default_text(self) -> str:
        return default_text(self.default)


@dataclass(frozen=True)
class Check(Setting):
    """One row of the gate's table: a :class:`GateConfig` field and what it judges."""

    name: CheckName  # e.g. "spread_relative"; a level check's results add the level
    direction: str  # "min": value >= threshold passes; "max": value <= threshold
    scope: str  # one of SCOPES
    read: Callable[[MatrixReport, GateConfig], Reading] | None
    read_levels: Callable[[MatrixReport, float | None], list[CheckResult]] | None
    read_report: Callable[[CheckpointReport], Reading] | None
    collapse: bool
    label: str | None

    def threshold(self, cfg: GateConfig) -> float | None:
        return getattr(cfg, self.field)

    def judge(self, role: str, reading: Reading, threshold: float | None) -> CheckResult:
        """The result of a block or row check. Undefined fails a floor (the rows do not
        show it is met) and skips a ceiling (nothing shows it is crossed)."""
        name, v = self.name, reading.value
        if threshold is None:
            return CheckResult(name, role, "skip", v, None, DISABLED)
        why = f": {reading.why}" if reading.why else ""
        if v is None:
            if self.direction == "min" and reading.measurable:
                return CheckResult(name, role, "fail", None, threshold, f"{name} is undefined{why}")
            return CheckResult(name, role, "skip", None, threshold, f"{name} undefined{why}")
        ok = v >= threshold if self.direction == "min" else v <= threshold
        rel = {("min", True): ">=", ("min", False): "<", ("max", True): "<=", ("max", False): ">"}
        shown = format_value(v) if reading.shown is None else reading.shown
        message = f"{name} {shown} {rel[self.direction, ok]} {threshold:g}"
        if not ok:
            return CheckResult(name, role, "fail", v, threshold, message + why)
        if reading.warning:
            return CheckResult(name, role, "warn", v, threshold, f"{message}: {reading.warning}")
        return CheckResult(name, role, "pass", v, threshold, message)


def _row(f) -> Check:
    direction, _, name = f.name.partition("_")
    if direction not in ("min", "max"):
        raise ValueError(f"GateConfig.{f.name}: a threshold's name starts with min_ or max_")
    row = dict(f.metadata[ROW])
    check = row.pop("check")
    if check is None:
        try:
            check = CheckName(name)
        except ValueError:
            raise ValueError(f"GateConfig.{f.name}: {name!r} is no CheckName") from None
    return Check(name=check, field=f.name, direction=direction, default=f.default, **row)


@dataclass(frozen=True)
class Rule(Setting):
    """A setting of the gate that is no check: it says how a check counts (a flag, a
    config key and an action input, like a threshold)."""


# In field order, which is the order of the results: block checks, row checks, level checks.
CHECKS: tuple[Check, ...] = tuple(_row(f) for f in fields(GateConfig) if ROW in f.metadata)
# Every setting of the gate, checks and rules, in field order: the flags, the config keys,
# the action's inputs and the docs' table.
SETTINGS: tuple[Setting, ...] = tuple(
    _row(f) if ROW in f.metadata else Rule(f.name, f.default, **f.metadata[RULE])
    for f in fields(GateConfig)
)
THRESHOLDS: tuple[str, ...] = tuple(s.field for s in SETTINGS)


MATRIX_NAMES = {"input": "input embedding", "output": "output head"}


@dataclass
class GateResult:
    path: str
    checks: list[CheckResult]
    tensors: dict[str, str] = field(default_factory=dict)  # role -> tensor name
    # The diagnosis, as the terminal and the report word it (geodiag.gate.verdict.judge sets
    # them; None from run_gate alone): the sentence, and the cause and remedy it names.
    verdict: str | None = None
    cause: str | None = None
    remedy: str | None = None

    @property
    def passed(self) -> bool:
        return all(c.status != "fail" for c in self.checks)


def load_config(path: Path) -> dict:
    """Threshold keys from a TOML file: top level, ``[geodiag]`` or ``[tool.geodiag]``."""
    data = read_document(path, tomllib.loads, "TOML", missing="config file not found")
    table = data.get("tool", {}).get("geodiag") or data.get("geodiag")
    if table is None:
        table = {} if path.name == "pyproject.toml" else data
    for key, value in table.items():
        if key.replace("-", "_") not in THRESHOLDS:
            raise InputError(
                path, f"unknown gate setting '{key}' (known: {', '.join(sorted(THRESHOLDS))})"
            )
        if value is not None and not isinstance(value, int | float) or isinstance(value, bool):
            raise InputError(path, f"gate setting '{key}' must be a number, got {value!r}")
        if key.replace("-", "_") in COUNTS and value is not None and value != int(value):
            raise InputError(path, f"gate setting '{key}' is a count, got {value!r}")
    return {k.replace("-", "_"): _number(k.replace("-", "_"), v) for k, v in table.items()}


# The settings that count (int fields: the flag takes a whole number, the config file too).
COUNTS = frozenset(
    name for name, hint in get_type_hints(GateConfig).items() if int in get_args(hint)
)


def _number(name: str, value: float | None) -> float | None:
    if value is None:
        return None
    return int(value) if name in COUNTS else float(value)


def with_overrides(cfg: GateConfig, overrides: Mapping[str, float | None]) -> GateConfig:
    """``cfg`` with each threshold of ``overrides`` that is not None (None: not given)."""
    return replace(cfg, **{k: v for k, v in overrides.items() if v is not None})


def resolve_config(
    config_file: Path | None, overrides: Mapping[str, float | None], cwd: Path | None = None
) -> GateConfig:
    """Defaults < ``[tool.geodiag]`` in ./pyproject.toml < ``--config FILE`` < flags."""
    cfg = GateConfig()
    pyproject = (cwd or Path.cwd()) / "pyproject.toml"
    if config_file is None and pyproject.is_file():
        cfg = replace(cfg, **load_config(pyproject))
    if config_file is not None:
        cfg = replace(cfg, **load_config(config_file))
    return with_overrides(cfg, overrides)


# Geometry of a block needs two rows: one row has no spread, no pairs, no rank around its mean.
SINGLE_ROW = "undefined for a single new row (no spread, no pairs around its mean)"


def check_matrix(m: MatrixReport, cfg: GateConfig) -> list[CheckResult]:
    """The results of every block, row and level check on ``m``."""
    out = []
    for c in CHECKS:
        t = c.threshold(cfg)
        if c.scope == "checkpoint":
            continue  # run_gate judges it once per checkpoint
        if c.read_levels is not None:
            out += c.read_levels(m, t)
        elif c.scope == "block" and m.n_new < 2:
            message = DISABLED if t is None else f"{c.name} {SINGLE_ROW}"
            out.append(CheckResult(c.name, m.role, "skip", None, t, message))
        else:
            assert c.read is not None
            out.append(c.judge(m.role, c.read(m, cfg), t))
    return out


def collapse_checks(structure: Mapping[str, object], cfg: GateConfig) -> list[CheckResult]:
    """The failed collapse checks of a snapshot's ``structure`` (geodiag.analysis.trajectory: a
    value per check name); the checks it does not record are not tested."""
    out = []
    for c in CHECKS:
        if c.collapse and c.name in structure:
            value = structure[c.name]
            assert value is None or isinstance(value, int | float), (c.name, value)
            res = c.judge("input", Reading(value), c.threshold(cfg))
            out += [res] if res.status == "fail" else []
    return out


def run_gate(report: CheckpointReport, cfg: GateConfig) -> GateResult:
    checks = [c for m in report.matrices for c in check_matrix(m, cfg)]
    for c in CHECKS:
        if c.scope == "checkpoint" and c.read_report is not None:
            checks.append(c.judge(report.matrices[0].role, c.read_report(report), c.threshold(cfg)))
    return GateResult(report.path, checks, {m.role: m.tensor for m in report.matrices})
