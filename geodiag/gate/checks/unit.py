"""What a check of the gate is: one :class:`Check` unit, a module of this package.

A unit holds everything about its check: the threshold (its ``GateConfig`` field, default,
help, metavar and direction), the value it reads off a matrix, how it reads it (with the
words said after a failure), the sentence the verdict gives its result, and the diagnosis
it offers when it explains a failed matrix (cause and remedy). The registry
(:mod:`geodiag.gate.checks`) lists the units; ``GateConfig``, ``CheckName``, the flags, the
action's inputs and the docs' tables are built from that list.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from geodiag.analysis.reports import CheckpointReport, MatrixReport
from geodiag.gate.advice import Advice, Diagnosis
from geodiag.jsonio import JSON_SKIP

# What a check judges: the new rows together (undefined for a single row), each row, each
# level (one result per level), the checkpoint's files (one result, on the input matrix).
# The registry lists its checks in this order (a test checks).
SCOPES = ("block", "row", "level", "checkpoint")
DISABLED = "check disabled"  # the message of a check whose threshold is None


def shown_name(check: str, level: str | None = None) -> str:
    """The name a result is shown by: the check's, or ``rsa[<level>]`` for a level."""
    return str(check) if level is None else f"{check}[{level}]"


@dataclass
class CheckResult:
    name: str = field(init=False)  # as shown: the check's, or "rsa[<level>]" (shown_name)
    check: str = field(metadata={JSON_SKIP: True})  # a CheckName; the name says it in the JSON
    matrix: str  # "input" | "output"
    status: str  # "pass" | "warn" | "fail" | "skip"
    value: float | None
    threshold: float | None
    message: str
    level: str | None = field(default=None, metadata={JSON_SKIP: True})  # a level check's

    def __post_init__(self) -> None:
        self.name = shown_name(self.check, self.level)


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


def default_text(default: float | None) -> str:
    """A default as the help, the README and the action show it."""
    return "off" if default is None else f"{default:g}"


@dataclass(frozen=True, kw_only=True)
class Setting:
    """A field of ``GateConfig`` as the command line, the config file, the action and the
    docs show it: a check (:class:`Check`) or a rule (:class:`Rule`)."""

    field: str = ""  # the GateConfig field, e.g. "min_spread_ratio"
    default: float | None
    help: str  # one line: the flag's, the action input's, the docs row's (default added)
    metavar: str = "X"
    count: bool = False  # a whole number: the flag and the config file take an int

    @property
    def flag(self) -> str:
        return "--" + self.field.replace("_", "-")

    @property
    def default_text(self) -> str:
        return default_text(self.default)


@dataclass(frozen=True, kw_only=True)
class Rule(Setting):
    """A setting of the gate that is no check: it says how a check counts (a flag, a
    config key and an action input, like a threshold). Its check's unit holds it."""


# How a check's reader is called, by scope: a block or row check reads one matrix under the
# config (its rules); a level check makes its results, one per level; a checkpoint check
# reads the report once.
Read = Callable[[MatrixReport, object], Reading]
ReadLevels = Callable[["Check", MatrixReport, float | None], list[CheckResult]]
ReadReport = Callable[[CheckpointReport], Reading]
# What a failed check says of its matrix: the diagnosis (None: another check's to give).
Explain = Callable[[MatrixReport, list[CheckResult], Advice], Diagnosis | None]


@dataclass(frozen=True, kw_only=True)
class Check(Setting):
    """One check of the gate, whole: threshold, value, reading, sentence and diagnosis.

    name: the figure it reads (``spread_relative``); its field is ``min_`` or ``max_`` +
    the name unless ``field`` names it (three flags kept their older names). direction:
    "min" (value >= threshold passes) or "max". value: the figure off a matrix (block and
    row checks; None: undefined or not measured), which trajectory records keep. sentence:
    the finding of one result, no remedy (the diagnosis carries it, once). explain: the
    diagnosis of a matrix this check failed, with its remedy; rank: which failed check
    explains first (lower: the more specific cause; a function of the matrix when that
    depends on the rows). collapse: failing it means the rows are (still) collapsed; the
    Trainer callback tests it whenever its snapshot records the value. label: the title of
    its panel in the report's plots over training (None: no panel). rules: the settings
    that say how it counts.
    """

    name: str
    direction: str
    scope: str = "block"
    value: Callable[[MatrixReport], float | None] | None = None
    read: Read | None = None
    read_levels: ReadLevels | None = None
    read_report: ReadReport | None = None
    sentence: Callable[[CheckResult, MatrixReport], str]
    explain: Explain
    rank: int | Callable[[MatrixReport], int]
    collapse: bool = False
    label: str | None = None
    rules: tuple[Rule, ...] = ()

    def __post_init__(self) -> None:
        if not self.field:
            object.__setattr__(self, "field", f"{self.direction}_{self.name}")
        wanted = {"level": "read_levels", "checkpoint": "read_report"}.get(self.scope, "read")
        readers = ("read", "read_levels", "read_report")
        given = [k for k in readers if getattr(self, k) is not None]
        if self.scope not in SCOPES or given != [wanted]:
            raise ValueError(f"{self.name}: a {self.scope!r} check takes {wanted}, and only it")
        if self.direction not in ("min", "max") or not self.field.startswith(self.direction):
            raise ValueError(f"{self.field}: a threshold's name starts with min_ or max_")

    def threshold(self, cfg: object) -> float | None:
        return getattr(cfg, self.field)

    def rank_of(self, m: MatrixReport) -> int:
        return self.rank(m) if callable(self.rank) else self.rank

    def say(self, c: CheckResult, m: MatrixReport) -> str:
        """The finding of result ``c``, in one sentence. A skipped result says its message,
        except a level check's, which names its level."""
        if c.status == "skip" and self.scope != "level":
            return c.message if c.message.endswith(".") else c.message + "."
        return self.sentence(c, m)

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
