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

Each check is one unit, a module of this package holding a :class:`Check` (threshold,
value, reading, sentence, diagnosis: :mod:`geodiag.gate.checks.unit`). :data:`UNITS` below
lists them; ``CheckName``, ``GateConfig`` (a field per check and rule), :data:`CHECKS`,
:data:`SETTINGS` and the verdict's diagnoses are built from that list, and so are the
``geodiag check`` flags, the keywords of ``geodiag.check``, the Trainer callback's collapse
test, the report's threshold lines, the GitHub Action's inputs and the docs' tables
(action.yml and docs/cli.md are rendered by :mod:`tools.gate_docs`). Adding a check is one
module here and one line in :data:`UNITS`.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path

from geodiag.analysis.reports import CheckpointReport, MatrixReport
from geodiag.errors import InputError
from geodiag.gate.checks import (
    effective_rank,
    effective_rank_ratio,
    mean_pairwise_cosine,
    n_untrained,
    norm_ratio,
    rsa,
    spread_relative,
    vocabulary_disagreements,
)
from geodiag.gate.checks.rsa import rsa_by_level, rsa_p_by_level
from geodiag.gate.checks.unit import (
    DISABLED,
    SCOPES,
    Check,
    CheckResult,
    Reading,
    Rule,
    Setting,
    default_text,
    format_value,
    shown_name,
)
from geodiag.jsonio import read_document
from geodiag.settings import THRESHOLDS as THRESHOLDS_PANEL
from geodiag.settings import setting

__all__ = [
    "CHECKS",
    "COUNTS",
    "DISABLED",
    "MATRIX_NAMES",
    "SCOPES",
    "SETTINGS",
    "SINGLE_ROW",
    "THRESHOLDS",
    "VALUES",
    "Check",
    "CheckName",
    "CheckResult",
    "GateConfig",
    "GateResult",
    "Reading",
    "Rule",
    "Setting",
    "check_matrix",
    "collapse_checks",
    "default_text",
    "format_value",
    "load_config",
    "resolve_config",
    "rsa_by_level",
    "rsa_p_by_level",
    "run_gate",
    "shown_name",
    "with_overrides",
]

# The registry: one line per check, in the order of the results (block checks, row
# checks, level checks, the checkpoint's; a test checks).
UNITS: tuple[Check, ...] = (
    effective_rank_ratio.CHECK,
    effective_rank.CHECK,
    spread_relative.CHECK,
    mean_pairwise_cosine.CHECK,
    n_untrained.CHECK,
    norm_ratio.CHECK,
    rsa.CHECK,
    vocabulary_disagreements.CHECK,
)

# A check's name: its results carry it, its GateConfig field is ``min_`` or ``max_`` + it
# (or its unit names the field: three flags kept their older names), and a trajectory
# record's ``structure`` keys its value by it. The name is the figure's own
# (``spread_relative``, ``mean_pairwise_cosine``, ``n_untrained``), as the metrics JSON and
# the terminal tables name it.
CheckName = StrEnum("CheckName", {u.name.upper(): u.name for u in UNITS}, module=__name__)
CheckName.__doc__ = "A check's name, one per unit of :data:`UNITS`."

# The units, named by their CheckName.
CHECKS: tuple[Check, ...] = tuple(replace(u, name=CheckName(u.name)) for u in UNITS)
# Every setting of the gate, checks and the rules each check holds after it: the flags,
# the config keys, the action's inputs and the docs' table.
SETTINGS: tuple[Setting, ...] = tuple(s for c in CHECKS for s in (c, *c.rules))
THRESHOLDS: tuple[str, ...] = tuple(s.field for s in SETTINGS)
# The settings that count (the flag takes a whole number, the config file too).
COUNTS = frozenset(s.field for s in SETTINGS if s.count)
# The value of each block or row check off a matrix (the RSA check reads one value per
# level: rsa_by_level). None: undefined, or not measured.
VALUES = {c.name: c.value for c in CHECKS if c.value is not None}


def _field(s: Setting) -> tuple[str, type, dataclasses.Field]:
    option = setting(
        s.default, help=f"{s.help} [{s.default_text}].", cli_default=None, metavar=s.metavar
    )
    kind = (int if s.count else float) | None
    return s.field, kind, field(default=s.default, metadata=option.metadata)


GateConfig = dataclasses.make_dataclass(
    "GateConfig",
    [_field(s) for s in SETTINGS],
    frozen=True,
    namespace={"HELP_PANEL": THRESHOLDS_PANEL},
)
GateConfig.__module__ = __name__
GateConfig.__doc__ = """Thresholds, one per check, and the rules of the checks; ``None``
disables a check. Built from the units (:data:`SETTINGS`). A count is an ``int``: its flag
takes a whole number."""


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
            out += c.read_levels(c, m, t)
        elif c.scope == "block" and m.n_new < 2:
            message = DISABLED if t is None else f"{c.name} {SINGLE_ROW}"
            out.append(CheckResult(c.name, m.role, "skip", None, t, message))
        else:
            assert c.read is not None
            out.append(c.judge(m.role, c.read(m, cfg), t))
    return out


def collapse_checks(structure: Mapping[str, object], cfg: GateConfig) -> list[CheckResult]:
    """The failed collapse checks of a snapshot's ``structure`` (geodiag.gate.trajectory: a
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
