"""The gate as a SARIF 2.1.0 log: what GitHub code scanning (``github/codeql-action/
upload-sarif``) and other CI dashboards read.

One run, tool ``geodiag``; one rule per row of the gate's table (:data:`CHECKS`: the rule
id is the check's name, ``rsa`` for every level, the level in the result's properties);
one result per failing (level ``error``) or warning (``warning``) check result, with the
message the gate writes and the checkpoint's verdict after it (its cause and remedy also in
the result's properties). The location is the weights file that holds the matrix, as a URI
relative to the working directory when the file is inside it (code scanning resolves
those against the checkout), else a ``file:`` URI. GitHub rejects a result without a
physical location, so every result has one.

No ``region``: a weights file has no lines, and code scanning's upload hashes the file line
by line to fingerprint a result that names a line (``fingerprints.ts`` in
github/codeql-action), minutes on a checkpoint of gigabytes. Without a region it hashes
nothing and cannot tell one run's alert from the next, so each result carries its own
``partialFingerprints``: the rule, the check's shown name, the matrix, the tensor and the
file, so an alert stays the same alert while its value changes.

Names from files (token strings in messages, level names, tensor names, paths) go into
JSON strings only: :func:`geodiag.jsonio.dumps` escapes them, nothing here does.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from urllib.parse import quote_from_bytes

from geodiag.analysis.reports import CheckpointReport
from geodiag.gate.checks import CHECKS, MATRIX_NAMES, CheckResult, GateConfig, GateResult
from geodiag.jsonio import dumps, to_jsonable
from geodiag.version import __version__

SARIF_VERSION = "2.1.0"
# The OASIS schema's own id (2.1.0 with errata 01), as the log's $schema.
SARIF_SCHEMA = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)
LEVELS = {"fail": "error", "warn": "warning"}  # statuses with a result; pass and skip: none
FINGERPRINT = "geodiagCheck/v1"  # the partialFingerprints key (bump when its input changes)


def homepage() -> str | None:
    """The distribution's Homepage (pyproject's ``[project.urls]``), the driver's
    ``informationUri``; None while there is none (no made-up address). importlib.metadata
    (with the email package it reads metadata by) is imported here, when a SARIF file is
    written, not on every gate's start (~10 ms)."""
    from importlib import metadata

    try:
        urls = metadata.metadata("geodiag").get_all("Project-URL") or []
    except metadata.PackageNotFoundError:  # run from a source tree, not installed
        return None
    for entry in urls:
        label, _, url = entry.partition(",")
        if label.strip().lower() == "homepage" and url.strip():
            return url.strip()
    return None


def artifact_uri(file: str | os.PathLike[str], cwd: Path | None = None) -> str:
    """``file`` as a URI: relative to ``cwd`` (default: the working directory) when inside
    it, else ``file:`` and absolute. Percent-encoded from the file name's bytes (RFC 3986),
    as :meth:`pathlib.Path.as_uri` does; symlinks are kept (a Hub cache's snapshot names
    the file, its blob does not)."""
    path = Path(os.path.abspath(file))
    base = Path(os.path.abspath(cwd or os.getcwd()))
    if path.is_relative_to(base):
        return quote_from_bytes(os.fsencode(path.relative_to(base).as_posix()))
    return path.as_uri()


def rules() -> list[dict]:
    """One reportingDescriptor per row of the gate's table, in its order (ruleIndex)."""
    return [
        {
            "id": str(c.name),
            "shortDescription": {"text": c.help},
            "properties": {"flag": c.flag, "default": c.default, "scope": c.scope},
        }
        for c in CHECKS
    ]


RULE_INDEX = {c.name: i for i, c in enumerate(CHECKS)}


def _fingerprint(c: CheckResult, tensor: str, uri: str) -> str:
    key = json.dumps([str(c.check), c.name, c.matrix, tensor, uri])  # ASCII: any name encodes
    return hashlib.sha256(key.encode("ascii")).hexdigest()


def result(report: CheckpointReport, gate: GateResult, c: CheckResult, cwd: Path | None) -> dict:
    """The SARIF result of one failing or warning check result."""
    matrix = next(m for m in report.matrices if m.role == c.matrix)
    uri = artifact_uri(matrix.file, cwd)
    properties = {
        "checkpoint": gate.path,
        "matrix": c.matrix,
        "tensor": matrix.tensor,
        "value": c.value,
        "threshold": c.threshold,
    }
    if c.level is not None:
        properties["level"] = c.level
    # The checkpoint's diagnosis, as the terminal words it (geodiag.gate.verdict.judge).
    properties.update(verdict=gate.verdict, cause=gate.cause, remedy=gate.remedy)
    where = f"{MATRIX_NAMES.get(c.matrix, c.matrix)} {matrix.tensor}"
    diagnosis = f" Verdict: {gate.verdict}" if gate.verdict else ""
    return {
        "ruleId": str(c.check),
        "ruleIndex": RULE_INDEX[c.check],
        "level": LEVELS[c.status],
        "message": {"text": f"{where}: {c.message.rstrip('.')}.{diagnosis}"},
        "locations": [{"physicalLocation": {"artifactLocation": {"uri": uri}}}],
        "partialFingerprints": {FINGERPRINT: _fingerprint(c, matrix.tensor, uri)},
        "properties": properties,
    }


def sarif_log(
    reports: list[CheckpointReport],
    results: list[GateResult],
    cfg: GateConfig,
    cwd: Path | None = None,
) -> dict:
    """The SARIF log of gate ``results`` (one per report, same order) under ``cfg``."""
    driver = {"name": "geodiag", "version": __version__, "rules": rules()}
    if (url := homepage()) is not None:
        driver["informationUri"] = url
    found = [
        result(report, gate, c, cwd)
        for report, gate in zip(reports, results, strict=True)
        for c in gate.checks
        if c.status in LEVELS
    ]
    run = {
        "tool": {"driver": driver},
        "results": found,
        "properties": {"thresholds": to_jsonable(cfg)},
    }
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}


def sarif_text(reports: list[CheckpointReport], results: list[GateResult], cfg: GateConfig) -> str:
    """The log as the file holds it: strict JSON, names as read (:func:`~geodiag.jsonio.dumps`)."""
    return dumps(sarif_log(reports, results, cfg)) + "\n"
