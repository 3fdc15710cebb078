"""The CI gate: thresholds over a :class:`CheckpointReport`, pass / warn / fail per check.

Collapse has several faces, and no single number sees them all (README, "What the
gate catches"):
- rows set exactly to the mean: centered rank 0, spread 0, mean cosine 1;
- the mean plus tiny noise (``mean_resizing``): the *centered* effective rank is
  high, because the noise is full-rank, but the spread relative to the vocabulary
  is ~1e-5 and the mean cosine ~1. Only the scale-aware checks catch it;
- rows on a line: spread and mean cosine can look normal, the centered effective
  rank is ~1.
Each default therefore fails at least one check on each collapsed form, and a
random or grounded init passes them all.
"""

from __future__ import annotations

import tomllib
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from geodiag.analysis import CheckpointReport, MatrixReport
from geodiag.atomic import atomic_path
from geodiag.errors import InputError, cannot_read, nested_too_deeply


@dataclass(frozen=True)
class GateConfig:
    """Thresholds. ``None`` disables a check. Defaults documented in the README."""

    # Centered effective rank / min(n, d). Rows on a line score ~1/min(n, d).
    min_effective_rank_ratio: float | None = 0.1
    # Centered effective rank, absolute (off by default: it depends on n).
    min_effective_rank: float | None = None
    # Mean pairwise cosine of the new rows. Mean init (with or without noise) is ~1.
    max_mean_cosine: float | None = 0.9
    # RMS spread of the new rows / that of an equal-size vocabulary sample.
    # Mean + 1e-9*Sigma noise scores ~3e-5; a random init matched to the vocabulary ~1.
    min_spread_ratio: float | None = 0.05
    # Spearman RSA against the codebooks, every level (off by default: a random
    # init has no structure but is not collapsed; the report says so as a warning).
    min_rsa: float | None = None
    # New rows still at their init, found row by row: in a group of identical rows, at
    # the vocabulary mean, or the base's padding row unchanged (geodiag.metrics.untrained).
    # The block-level checks miss them when trained rows sit beside them.
    max_untrained_tokens: float | None = 0
    # Largest new-row norm / largest original-row norm. Logits scale with the norm: a row
    # 10x longer than any token the model knows wins every softmax it enters.
    max_norm_ratio: float | None = 10.0


@dataclass
class CheckResult:
    name: str  # e.g. "effective_rank_ratio"
    matrix: str  # "input" | "output"
    status: str  # "pass" | "warn" | "fail" | "skip"
    value: float | None
    threshold: float | None
    message: str


MATRIX_NAMES = {"input": "input embedding", "output": "output head"}


@dataclass
class GateResult:
    path: str
    checks: list[CheckResult]
    tensors: dict[str, str] = field(default_factory=dict)  # role -> tensor name

    @property
    def passed(self) -> bool:
        return all(c.status != "fail" for c in self.checks)


def load_config(path: Path) -> dict:
    """Threshold keys from a TOML file: top level, ``[geodiag]`` or ``[tool.geodiag]``."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(path, "config file not found") from None
    except OSError as e:
        raise cannot_read(path, e) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise InputError(path, f"not valid TOML ({e})") from None
    except RecursionError:
        raise nested_too_deeply(path, "TOML") from None
    table = data.get("tool", {}).get("geodiag") or data.get("geodiag")
    if table is None:
        table = {} if path.name == "pyproject.toml" else data
    known = {f.name for f in fields(GateConfig)}
    for key, value in table.items():
        key_ = key.replace("-", "_")
        if key_ not in known:
            raise InputError(
                path, f"unknown gate setting '{key}' (known: {', '.join(sorted(known))})"
            )
        if value is not None and not isinstance(value, int | float) or isinstance(value, bool):
            raise InputError(path, f"gate setting '{key}' must be a number, got {value!r}")
    return {k.replace("-", "_"): (None if v is None else float(v)) for k, v in table.items()}


def resolve_config(
    config_file: Path | None, overrides: dict, cwd: Path | None = None
) -> GateConfig:
    """Defaults < ``[tool.geodiag]`` in ./pyproject.toml < ``--config FILE`` < flags."""
    cfg = GateConfig()
    pyproject = (cwd or Path.cwd()) / "pyproject.toml"
    if config_file is None and pyproject.is_file():
        cfg = replace(cfg, **load_config(pyproject))
    if config_file is not None:
        cfg = replace(cfg, **load_config(config_file))
    return replace(cfg, **{k: v for k, v in overrides.items() if v is not None})


def _fmt(x: float | None) -> str:
    return "undefined" if x is None else f"{x:.4g}"


def _min_check(name, m: MatrixReport, value, threshold, why) -> CheckResult:
    if threshold is None:
        return CheckResult(name, m.role, "skip", value, None, "check disabled")
    if value is None:
        return CheckResult(name, m.role, "fail", None, threshold, f"{name} is undefined: {why}")
    ok = value >= threshold
    rel = ">=" if ok else "<"
    return CheckResult(name, m.role, "pass" if ok else "fail", value, threshold,
                       f"{name} {_fmt(value)} {rel} {threshold:g}" + ("" if ok else f": {why}"))  # fmt: skip


def _max_check(name, m: MatrixReport, value, threshold, shown: str, why) -> CheckResult:
    if threshold is None:
        return CheckResult(name, m.role, "skip", value, None, "check disabled")
    if value is None:
        return CheckResult(name, m.role, "skip", None, threshold, f"{name} undefined: {why}")
    ok = value <= threshold
    return CheckResult(name, m.role, "pass" if ok else "fail", value, threshold,
                       f"{name} {shown} {'<=' if ok else '>'} {threshold:g}" + ("" if ok else f": {why}"))  # fmt: skip


def _untrained_check(m: MatrixReport, cfg: GateConfig) -> CheckResult:
    u = m.untrained
    if u is None:
        return _max_check("untrained_tokens", m, None, cfg.max_untrained_tokens, "",
                          "rows not measured one by one")  # fmt: skip
    why = ""
    if u.untrained is not None:
        names = ", ".join(u.untrained.tokens) + (
            ", ..." if u.untrained.size > len(u.untrained.tokens) else ""
        )
        kinds = [f"{u.n_groups} group(s) of identical rows" if u.n_groups else "",
                 "at the vocabulary mean" if u.at_vocabulary_mean else "",
                 "unchanged padding rows of the base" if u.unchanged_padding else ""]  # fmt: skip
        why = (f"{u.n_untrained} of {m.n_new} new rows never left their init "
               f"({'; '.join(k for k in kinds if k)}): {names}")  # fmt: skip
    return _max_check("untrained_tokens", m, u.n_untrained, cfg.max_untrained_tokens,
                      f"{u.n_untrained}", why)  # fmt: skip


def _norm_check(m: MatrixReport, cfg: GateConfig) -> CheckResult:
    r = m.norm_ratio
    return _max_check("norm_ratio", m, r, cfg.max_norm_ratio, _fmt(r),
                      "the longest new row is far longer than any original row: the model "
                      "will emit it everywhere" if r is not None else
                      "no original vocabulary to compare the new rows' norms with")  # fmt: skip


# Geometry of a block needs two rows: one row has no spread, no pairs, no rank around its mean.
SINGLE_ROW = "undefined for a single new row (no spread, no pairs around its mean)"


def check_matrix(m: MatrixReport, cfg: GateConfig) -> list[CheckResult]:
    if m.n_new < 2:
        out = [CheckResult(name, m.role, "skip", None, t,
                           "check disabled" if t is None else f"{name} {SINGLE_ROW}")
               for name, t in (("effective_rank_ratio", cfg.min_effective_rank_ratio),
                               ("effective_rank", cfg.min_effective_rank),
                               ("spread_ratio", cfg.min_spread_ratio),
                               ("mean_cosine", cfg.max_mean_cosine))]  # fmt: skip
        return [*out, _untrained_check(m, cfg), _norm_check(m, cfg), *_rsa_checks(m, cfg)]
    g = m.new
    n = m.n_new
    spread = _min_check("spread_ratio", m, g.spread_relative, cfg.min_spread_ratio,
                        f"the {n} new rows sit within a tiny ball compared with the original vocabulary "
                        "(mean initialization, with or without small noise)")  # fmt: skip
    if m.reference is None and cfg.min_spread_ratio is not None:
        spread = CheckResult("spread_ratio", m.role, "skip", None, cfg.min_spread_ratio,
                             f"spread_ratio undefined, check skipped: {m.reference_undefined_reason}")  # fmt: skip
    out = [
        _min_check("effective_rank_ratio", m, g.centered.effective_rank_ratio, cfg.min_effective_rank_ratio,
                   f"the {n} new rows span few directions around their mean (collapsed, or on a line)"),
        _min_check("effective_rank", m, g.centered.effective_rank, cfg.min_effective_rank,
                   f"the {n} new rows span few directions around their mean"),
        spread,
    ]  # fmt: skip
    c = cfg.max_mean_cosine
    cos = g.mean_pairwise_cosine
    if c is None:
        out.append(CheckResult("mean_cosine", m.role, "skip", cos, None, "check disabled"))
    elif cos is None:
        out.append(
            CheckResult("mean_cosine", m.role, "skip", None, c, "undefined for fewer than 2 rows")
        )
    else:
        ok = cos <= c
        msg = f"mean_cosine {_fmt(cos)} {'<=' if ok else '>'} {c:g}"
        if not ok:
            msg += f": the {n} new rows all point the same way (mean initialization?)"
        out.append(CheckResult("mean_cosine", m.role, "pass" if ok else "fail", cos, c, msg))
    out += [_untrained_check(m, cfg), _norm_check(m, cfg)]
    out.extend(_rsa_checks(m, cfg))
    return out


def _rsa_checks(m: MatrixReport, cfg: GateConfig) -> list[CheckResult]:
    out = []
    for lv in m.levels:
        name = f"rsa[{lv.name}]"
        if lv.rsa is None:
            status = "fail" if cfg.min_rsa is not None else "skip"
            out.append(
                CheckResult(
                    name, m.role, status, None, cfg.min_rsa, f"RSA skipped: {lv.rsa_skip_reason}"
                )
            )
            continue
        r, p = lv.rsa.spearman, lv.rsa.p_value
        if r is None:
            status = "fail" if cfg.min_rsa is not None else "warn"
            msg = f"RSA undefined: {lv.rsa.undefined_reason}"
        elif cfg.min_rsa is not None:
            status = "pass" if r >= cfg.min_rsa else "fail"
            msg = f"RSA {r:.3f} (p={_fmt(p)}) {'>=' if r >= cfg.min_rsa else '<'} {cfg.min_rsa:g}"
        elif p is not None and p >= 0.05:
            status = "warn"
            # The remedy depends on how the rows were made: the verdict gives it (verdict.py).
            msg = (f"RSA {r:.3f} (p={p:.3g}): the rows carry no trace of the codebook's "
                   f"structure at level {lv.name!r}")  # fmt: skip
        else:
            status, msg = "pass", f"RSA {r:.3f} (p={_fmt(p)})"
        out.append(CheckResult(name, m.role, status, r, cfg.min_rsa, msg))
    return out


def run_gate(report: CheckpointReport, cfg: GateConfig) -> GateResult:
    checks = [c for m in report.matrices for c in check_matrix(m, cfg)]
    return GateResult(report.path, checks, {m.role: m.tensor for m in report.matrices})


def text_summary(res: GateResult) -> str:
    """The terminal form of one result: checks grouped under the matrix they judge.

    Skipped checks are listed with their reason (a check that cannot be computed is
    said to be skipped, never silently dropped); disabled ones are not.
    """
    lines = [f"{res.path}: {'PASS' if res.passed else 'FAIL'}"]
    for role, tensor in res.tensors.items():
        mine = [c for c in res.checks if c.matrix == role and c.message != "check disabled"]
        lines.append(f"  {MATRIX_NAMES.get(role, role)} {tensor}:")
        lines += [f"    [{c.status:4}] {c.message}" for c in mine]
    return "\n".join(lines)


def write_junit(results: list[GateResult], path: Path) -> None:
    """JUnit XML, one testcase per check, so CI systems list each threshold."""
    suites = ET.Element("testsuites", name="geodiag")
    for res in results:
        suite = ET.SubElement(suites, "testsuite", name=f"geodiag check {res.path}")
        counts = {"tests": 0, "failures": 0, "skipped": 0}
        for c in res.checks:
            counts["tests"] += 1
            case = ET.SubElement(suite, "testcase", classname=f"geodiag.{c.matrix}", name=c.name)
            if c.status == "fail":
                counts["failures"] += 1
                ET.SubElement(
                    case, "failure", message=c.message, type="GateFailure"
                ).text = c.message
            elif c.status == "skip":
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=c.message)
            elif c.status == "warn":
                ET.SubElement(case, "system-out").text = f"warning: {c.message}"
        for k, v in counts.items():
            suite.set(k, str(v))
    with atomic_path(path) as tmp:
        ET.ElementTree(suites).write(tmp, encoding="utf-8", xml_declaration=True)


def markdown_summary(results: list[GateResult]) -> str:
    lines = []
    for res in results:
        lines.append(f"### geodiag check `{res.path}`: {'passed' if res.passed else 'FAILED'}\n")
        lines.append("| check | matrix | status | value | threshold |")
        lines.append("|---|---|---|---|---|")
        for c in res.checks:
            thr = "" if c.threshold is None else f"{c.threshold:g}"
            lines.append(f"| {c.name} | {c.matrix} | {c.status} | {_fmt(c.value)} | {thr} |")
        lines.append("")
    return "\n".join(lines) + "\n"
