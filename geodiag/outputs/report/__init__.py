"""The HTML report and the projector export: format what :mod:`geodiag.analysis.checkpoint` computes.

``options`` says what the report computes and shows, ``build`` computes the report
model, ``verdict`` explains the gate, ``figures`` draws, ``html`` formats, ``write``
writes atomically, ``projector`` exports TensorBoard files.
matplotlib, seaborn and jinja2 are imported only when a report is rendered.

The names below are loaded on first use: ``geodiag.cli`` reads ``ReportOptions`` to build
``geodiag report``'s flags, and a gate that never writes a report should not pay for
importing the report model at start-up.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from geodiag.outputs.report.build import Report, build_report
    from geodiag.outputs.report.options import DEFAULT_OUTPUT, ReportOptions
    from geodiag.outputs.report.projector import export_projector
    from geodiag.outputs.report.write import ReportFiles, write_report

_HOME = {
    "DEFAULT_OUTPUT": "geodiag.outputs.report.options",
    "Report": "geodiag.outputs.report.build",
    "ReportFiles": "geodiag.outputs.report.write",
    "ReportOptions": "geodiag.outputs.report.options",
    "build_report": "geodiag.outputs.report.build",
    "export_projector": "geodiag.outputs.report.projector",
    "write_report": "geodiag.outputs.report.write",
}
__all__ = [
    "DEFAULT_OUTPUT",
    "Report",
    "ReportFiles",
    "ReportOptions",
    "build_report",
    "export_projector",
    "write_report",
]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'geodiag.outputs.report' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOME[name]), name)
