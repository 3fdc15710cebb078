"""The gate's pages where CI users read them: the terminal summary, JUnit XML, a SARIF log
(:mod:`geodiag.outputs.sarif`), GitHub's job summary (Markdown) and workflow annotations.
Names from files pass through the sink's function of :mod:`geodiag.escape`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from geodiag.analysis.reports import CheckpointReport
from geodiag.atomic import Text, atomic_write_many
from geodiag.errors import InputError, os_reason
from geodiag.escape import (
    markdown_cell,
    markdown_code,
    terminal,
    terminal_lines,
    workflow_message,
    workflow_property,
    xml_text,
)
from geodiag.gate.checks import (
    DISABLED,
    MATRIX_NAMES,
    CheckResult,
    GateConfig,
    GateResult,
    format_value,
)
from geodiag.io.vocabulary.references import REFERENCE_NOTES
from geodiag.outputs.text import dropped_lines, integrity_lines, sample_lines


def text_summary(res: GateResult, *, quiet: bool = False) -> str:
    """The terminal form of one result: checks grouped under the matrix they judge.

    Skipped checks are listed with their reason (a check that cannot be computed is
    said to be skipped, never silently dropped); disabled ones are not. Checks that say
    the same but for their name (RSA not measured at every level, for want of codebooks)
    share one line. ``quiet``: the failed checks only.
    """
    lines = [f"{res.path}: {'PASS' if res.passed else 'FAIL'}"]
    for role, tensor in res.tensors.items():
        mine = [c for c in res.checks if c.matrix == role and c.message != DISABLED]
        mine = [c for c in mine if c.status == "fail"] if quiet else mine
        if mine:
            lines.append(f"  {MATRIX_NAMES.get(role, role)} {tensor}:")
        lines += [f"    [{status:4}] {text}" for status, text in _alike_together(mine)]
    return terminal_lines(lines)


def _alike_together(checks: list[CheckResult]) -> list[tuple[str, str]]:
    """(status, message) per line: a run of checks with one status whose messages differ
    only in the check's name at their start is said once, naming them all."""
    runs: list[tuple[str, list[str], str, str]] = []  # status, names, the rest, message
    for c in checks:
        rest = c.message.removeprefix(c.name)
        if c.level is not None:  # "... of level 'a' ...": the names say which levels
            rest = rest.replace(f"level {c.level!r}", "each level")
        last = runs[-1] if runs else None
        if last and rest != c.message and (last[0], last[2]) == (c.status, rest):
            last[1].append(c.name)
        else:
            runs.append((c.status, [c.name], rest, c.message))
    return [(s, ", ".join(names) + rest if len(names) > 1 else m) for s, names, rest, m in runs]


def check_text(report: CheckpointReport, res: GateResult, *, quiet: bool = False) -> str:
    """What ``geodiag check`` prints of one checkpoint: its checks, what was dropped or
    sampled, the integrity findings and usage notes, and the verdict; ``quiet``: the
    failed checks and the verdict only."""
    lines = [text_summary(res, quiet=quiet)]
    if not quiet:
        for m in report.matrices:
            lines += [
                terminal(f"{line} [{m.tensor}]")
                for line in dropped_lines(m, indent="  ") + sample_lines(m, indent="  ")
            ]
        lines += [terminal(f"  {line}") for line in integrity_lines(report)]
        # What the rows' movement was measured from, or why not: a verdict may rest on it.
        lines += [terminal(f"  {n}") for n in report.notes if n.startswith(REFERENCE_NOTES)]
        # A source of usage that could not be counted.
        lines += [terminal(f"  note: {note}") for note in report.usage_notes]
    lines.append(terminal(f"  verdict: {res.verdict}"))
    return "\n".join(lines)


def summary_line(results: list[GateResult]) -> str:
    """The last line over several checkpoints: "1 of 2 failed: ckpt-mean", or "all 2
    passed" (and which warned)."""
    failed = [r.path for r in results if not r.passed]
    if failed:
        return terminal(f"{len(failed)} of {len(results)} failed: {', '.join(failed)}")
    warned = [r.path for r in results if any(c.status == "warn" for c in r.checks)]
    said = f" ({len(warned)} with warnings: {', '.join(warned)})" if warned else ""
    return terminal(f"all {len(results)} passed{said}")


def annotation(res: GateResult, c: CheckResult) -> str:
    """The GitHub ``::error`` workflow command of a failed check. The title holds a
    level name and the message names tokens: it is printed to stderr, so both go
    through ``terminal`` first, then the runner's own escaping, so that neither can end
    the title, start a line, or issue a command of its own (:mod:`geodiag.escape`)."""
    title = workflow_property(terminal(f"geodiag {c.name}"))
    where = f"{res.path} ({c.matrix}, {res.tensors.get(c.matrix)})"
    return f"::error title={title}::{workflow_message(terminal(f'{where}: {c.message}'))}"


def diagnosis_lines(res: GateResult) -> str:
    """The checkpoint's diagnosis (:func:`geodiag.gate.verdict.judge`) under a failure's
    text: the verdict sentence, then the cause and the remedy it names; empty when
    ``res`` came from the gate alone."""
    lines = [
        f"{label}: {text}"
        for label, text in (("verdict", res.verdict), ("cause", res.cause), ("remedy", res.remedy))
        if text
    ]
    return "\n\n" + "\n".join(lines) if lines else ""


def junit_xml(results: list[GateResult]) -> bytes:
    """JUnit XML, one testcase per check, so CI systems list each threshold. Paths, level
    names and messages (which name tokens) pass through :func:`~geodiag.escape.xml_text`:
    ElementTree writes a control character as it is, and the file would not parse."""
    import xml.etree.ElementTree as ET  # only for --junit

    suites = ET.Element("testsuites", name="geodiag")
    for res in results:
        suite = ET.SubElement(suites, "testsuite", name=xml_text(f"geodiag check {res.path}"))
        counts = {"tests": 0, "failures": 0, "skipped": 0}
        for c in res.checks:
            counts["tests"] += 1
            case = ET.SubElement(
                suite, "testcase", classname=xml_text(f"geodiag.{c.matrix}"), name=xml_text(c.name)
            )
            message = xml_text(c.message)
            if c.status == "fail":
                counts["failures"] += 1
                failure = ET.SubElement(case, "failure", message=message, type="GateFailure")
                failure.text = message + xml_text(diagnosis_lines(res))
            elif c.status == "skip":
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=message)
            elif c.status == "warn":
                ET.SubElement(case, "system-out").text = f"warning: {message}"
        for k, v in counts.items():
            suite.set(k, str(v))
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True)


def markdown_summary(results: list[GateResult]) -> str:
    """GitHub's job summary: a heading and a table per result. GitHub renders the HTML in
    it, so the path and the check names (a level's name is from the sidecar) are escaped
    for markdown (:mod:`geodiag.escape`)."""
    lines = []
    for res in results:
        verdict = "passed" if res.passed else "FAILED"
        lines.append(f"### geodiag check {markdown_code(res.path)}: {verdict}\n")
        if res.verdict:  # the diagnosis, as the terminal words it
            lines.append(f"{markdown_cell(res.verdict)}\n")
        lines.append("| check | matrix | status | value | threshold |")
        lines.append("|---|---|---|---|---|")
        for c in res.checks:
            thr = "" if c.threshold is None else f"{c.threshold:g}"
            name, matrix = markdown_cell(c.name), markdown_cell(c.matrix)
            lines.append(f"| {name} | {matrix} | {c.status} | {format_value(c.value)} | {thr} |")
        lines.append("")
        # What each failure or warning found (the untrained tokens named with their use).
        said = [c for c in res.checks if c.status in ("fail", "warn")]
        lines += [f"- {c.status} {markdown_cell(c.name)}: {markdown_cell(c.message)}" for c in said]
        lines += [""] if said else []
    return "\n".join(lines) + "\n"


def _append_step_summary(path: Path, text: str) -> None:
    """Append to GitHub's job summary; a path that cannot take it stops the run (exit 2)."""
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise InputError(
            path, f"cannot append the step summary ($GITHUB_STEP_SUMMARY): {os_reason(e)}"
        ) from None


def write_ci_pages(
    reports: list[CheckpointReport],
    results: list[GateResult],
    cfg: GateConfig,
    *,
    junit: Path | None = None,
    sarif: Path | None = None,
) -> None:
    """The JUnit and SARIF files asked for, written together (a failure leaves neither),
    then the job summary when GitHub gives its path. ``results``: the gate's, one per
    report, under ``cfg``."""
    files: dict[Path, Text] = {}
    if junit is not None:
        files[junit] = junit_xml(results)
    if sarif is not None:
        from geodiag.outputs.sarif import sarif_text  # only for --sarif

        files[sarif] = sarif_text(reports, results, cfg)
    atomic_write_many(files)
    if summary := os.environ.get("GITHUB_STEP_SUMMARY"):
        _append_step_summary(Path(summary), markdown_summary(results))


def print_annotations(results: list[GateResult]) -> None:
    """One ``::error`` line on stderr per failed check, under GitHub Actions only."""
    if os.environ.get("GITHUB_ACTIONS") != "true":
        return
    for res in results:
        for c in res.checks:
            if c.status == "fail":
                print(annotation(res, c), file=sys.stderr)
