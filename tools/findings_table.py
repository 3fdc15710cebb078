"""The false-FAIL table of docs/findings.md: every rule of the gate over a corpus of healthy
and broken checkpoints (tools/findings_corpus.py), with its false FAILs on the healthy ones
and what it catches on the broken ones. One command builds what is missing, runs the gate
(``geodiag check --json`` and ``geodiag metrics --json``, in process: the same judge as the
CLI) on each checkpoint, and rewrites the table between its markers:

    PYTHONPATH=. GEODIAG_DEMO=RUN python -m tools.findings_table [--corpus DIR] [--write]

A rule is each check of geodiag/gate/checks and each per-row finding kind
(geodiag.analysis.evidence.EVIDENCE). A check's false FAIL: it fails a healthy checkpoint.
A finding kind fires on a checkpoint when it flags a row; it fails where its evidence
counts (proof, a measured movement), else it warns.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import re
from dataclasses import dataclass, field
from pathlib import Path

from typer.testing import CliRunner

from geodiag.analysis.evidence import COUNTED, EVIDENCE
from geodiag.cli import app
from geodiag.gate.checks import CHECKS

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "findings.md"
START, END = "<!-- findings-table: start -->", "<!-- findings-table: end -->"
COMMAND = "PYTHONPATH=. GEODIAG_DEMO=RUN python -m tools.findings_table --write"
# The kinds' group in the metrics JSON (identical: counted over the flagged tokens).
_GROUP = {k: k for k in EVIDENCE} | {"vocabulary_mean": "at_vocabulary_mean"}


@dataclass
class Judged:
    """One checkpoint through the gate: its status, each check's, each kind's rows."""

    name: str
    healthy: bool
    made: str
    exit_code: int
    checks: dict[str, str]  # check name -> worst status over its results
    rows: dict[str, int] = field(default_factory=dict)  # finding kind -> rows flagged
    n_new: int = 0
    warnings: list[str] = field(default_factory=list)  # the integrity findings that warn


_ORDER = {"fail": 0, "warn": 1, "pass": 2, "skip": 3}


def judge(entry) -> Judged:
    """``entry`` (a findings_corpus.Entry) through `check --json` and `metrics --json`."""
    runner = CliRunner()
    args = [str(entry.path), "--json", *entry.args]
    res = runner.invoke(app, ["check", *args])
    checks: dict[str, str] = {}
    if res.exit_code in (0, 1):
        for result in json.loads(res.stdout)["results"]:
            for c in result["checks"]:
                name = re.sub(r"\[.*\]$", "", c["name"])
                old = checks.get(name, "skip")
                checks[name] = min(old, c["status"], key=_ORDER.__getitem__)
    out = Judged(entry.name, entry.healthy, entry.made, res.exit_code, checks)
    metrics = runner.invoke(app, ["metrics", *args])
    if metrics.exit_code == 0:
        m = json.loads(metrics.stdout)["matrices"][0]
        report = json.loads(metrics.stdout)
        out.warnings = [f["kind"] for f in report.get("integrity", []) if f["status"] == "warn"]
        u, out.n_new = m.get("untrained") or {}, m["n_new"]
        for kind in EVIDENCE:
            if kind == "identical":
                n = sum("identical" in t["findings"] for t in u.get("tokens", []))
            else:
                n = (u.get(_GROUP[kind]) or {}).get("size", 0)
            out.rows[kind] = n
    return out


def _cell(items: list[str]) -> str:
    return ", ".join(items) if items else "none"


def rule_rows(judged: list[Judged]) -> list[list[str]]:
    """Per rule: what it does on the healthy checkpoints (false FAILs, warnings) and on the
    broken ones (caught: FAIL; warned)."""
    healthy = [j for j in judged if j.healthy]
    broken = [j for j in judged if not j.healthy]
    rows = []
    for c in CHECKS:

        def said(js, status, c=c):
            return [j.name for j in js if j.checks.get(c.name) == status]

        rows.append(
            [
                f"check `{c.name}`",
                "gate check",
                f"{len(said(healthy, 'fail'))} of {len(healthy)}",
                str(len(said(healthy, "warn"))),
                f"{len(said(broken, 'fail'))} of {len(broken)}",
                str(len(said(broken, "warn"))),
            ]
        )
    for kind, evidence in EVIDENCE.items():
        # A counted kind fails a checkpoint where it flags rows and n_untrained fails (its
        # rows fed, or of unknown use); flagged rows nothing feeds (dead codes) warn.
        def failed(js, kind=kind):
            return [j for j in js if j.rows.get(kind) and j.checks.get("n_untrained") == "fail"]

        def fired(js, kind=kind):
            return [j for j in js if j.rows.get(kind)]

        def count(js, of=None, kind=kind):
            n = f"{len(js)}" + (f" of {of}" if of is not None else "")
            return n + (f" ({sum(j.rows[kind] for j in js)} rows)" if js else "")

        fails = kind in COUNTED
        fail_h = failed(healthy) if fails else []
        fail_b = failed(broken) if fails else []
        warn_h = [j for j in fired(healthy) if j not in fail_h]
        warn_b = [j for j in fired(broken) if j not in fail_b]
        rows.append(
            [
                f"finding `{kind}`",
                f"{evidence}: {'fails' if fails else 'warns'}",
                count(fail_h, len(healthy)),
                count(warn_h),
                count(fail_b, len(broken)),
                count(warn_b),
            ]
        )
    return rows


def checkpoint_rows(judged: list[Judged]) -> list[list[str]]:
    """Per checkpoint: how it was made, the gate's exit code, the checks that fail and warn,
    and the rows each finding kind flags."""
    out = []
    for j in judged:
        fired = [f"{k} {n}" for k, n in j.rows.items() if n]
        out.append(
            [
                j.name,
                "healthy" if j.healthy else "broken",
                j.made,
                str(j.exit_code),
                _cell([k for k, s in j.checks.items() if s == "fail"]),
                _cell([k for k, s in j.checks.items() if s == "warn"] + j.warnings),
                _cell(fired) + (f" of {j.n_new}" if fired else ""),
            ]
        )
    return out


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return lines + ["| " + " | ".join(r).replace("\n", " ") + " |" for r in rows]


def render(judged: list[Judged], left_out: list[str], when: str) -> str:
    """The section between the markers."""
    n_h = sum(j.healthy for j in judged)
    lines = [
        START,
        f"Generated by `{COMMAND}` ({when}, {platform.machine()}, "
        f"{len(judged)} checkpoints: {n_h} healthy, {len(judged) - n_h} broken). "
        "False FAIL: the rule fails a healthy checkpoint; caught: it fails a broken one. "
        "A finding kind counts the checkpoints where it flags a row.",
        "",
        *_table(
            [
                "rule",
                "evidence: gate",
                "false FAIL (healthy)",
                "warn (healthy)",
                "caught (broken)",
                "warn (broken)",
            ],
            rule_rows(judged),
        ),
        "",
        *_table(
            ["checkpoint", "", "made by", "exit", "fails", "warns", "rows flagged"],
            checkpoint_rows(judged),
        ),
    ]
    if left_out:
        lines += ["", "Left out (not built or not found here): " + "; ".join(left_out) + "."]
    return "\n".join([*lines, END])


def rewrite(doc: Path, section: str) -> bool:
    """Put ``section`` between the markers of ``doc`` (appended when it has none)."""
    text = doc.read_text(encoding="utf-8")
    if START in text:
        new = text[: text.index(START)] + section + text[text.index(END) + len(END) :]
    else:
        new = text.rstrip() + "\n\n" + section + "\n"
    if new != text:
        doc.write_text(new, encoding="utf-8")
    return new != text


def main(argv: list[str] | None = None) -> int:
    from tools.findings_corpus import build, corpus

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", type=Path, default=ROOT / "runs" / "findings-corpus")
    p.add_argument("--write", action="store_true", help=f"rewrite {DOC.relative_to(ROOT)}")
    p.add_argument("--no-build", action="store_true", help="judge only what is built")
    args = p.parse_args(argv)
    entries = corpus(args.corpus)
    ready = [e for e in entries if e.path.exists()] if args.no_build else build(entries)
    left_out = [e.name for e in entries if e not in ready]
    judged = [judge(e) for e in ready]
    section = render(judged, left_out, datetime.date.today().isoformat())
    print(section)
    if args.write and rewrite(DOC, section):
        print(f"rewrote {DOC}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
