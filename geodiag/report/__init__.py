"""The HTML report and the projector export: format what :mod:`geodiag.analysis.checkpoint` computes.

``build`` computes the report model, ``verdict`` explains the gate, ``figures`` draws,
``html`` formats, ``write`` writes atomically, ``projector`` exports TensorBoard files.
matplotlib, seaborn and jinja2 are imported only when a report is rendered.
"""

from geodiag.report.build import Report, ReportOptions, build_report
from geodiag.report.projector import export_projector
from geodiag.report.write import DEFAULT_OUTPUT, ReportFiles, write_report

__all__ = [
    "DEFAULT_OUTPUT",
    "Report",
    "ReportFiles",
    "ReportOptions",
    "build_report",
    "export_projector",
    "write_report",
]
