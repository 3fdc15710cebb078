"""Write a report: compute everything, render, then swap both files in at once.

Nothing touches the disk until the HTML and the JSON exist in memory; each file is
written to a temporary sibling and renamed, so a failed run leaves no half-written
report behind (an older report of the same name stays as it was).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from geodiag.atomic import atomic_write_many, check_writable
from geodiag.errors import InputError, require_extra
from geodiag.io.sources.options import ReadOptions
from geodiag.jsonio import dumps
from geodiag.outputs.report.build import Progress, Report, build_report
from geodiag.outputs.report.figures import FigureFormat
from geodiag.outputs.report.options import DEFAULT_OUTPUT, ReportOptions

# What the ``report`` extra of pyproject.toml installs, by import name -> distribution
# (a test holds the two lists equal). The gate's install has none of them.
REPORT_MODULES = {"matplotlib": "matplotlib", "PIL": "pillow", "jinja2": "jinja2"}
REPORT_INSTALL = "pip install 'geodiag[report]'"


def require_report_extra() -> None:
    """Fail before any work, with the install line, when the plotting stack is missing."""
    require_extra("geodiag report", "the plotting extra", REPORT_MODULES, REPORT_INSTALL)


@dataclass
class ReportFiles:
    html: Path
    json: Path
    report: Report
    html_bytes: int
    replaced: list[Path] = field(default_factory=list)  # of html and json, those already there


def output_paths(output: Path) -> tuple[Path, Path]:
    """(NAME.html, NAME.json) for ``-o NAME.html``."""
    output = Path(output)
    if output.suffix.lower() not in (".html", ".htm"):
        raise InputError(
            "-o", f"'{output}' should end in .html (the JSON goes beside it as NAME.json)"
        )
    if output.is_dir():
        raise InputError(
            "-o", f"'{output}' is a folder; give a file name such as {output / 'report.html'}"
        )
    return output, output.with_suffix(".json")


def write_report(
    paths: list[Path],
    output: Path = DEFAULT_OUTPUT,
    read: ReadOptions | None = None,
    opts: ReportOptions | None = None,
    progress: Progress | None = None,
    style: FigureFormat | None = None,
) -> ReportFiles:
    """Analyze ``paths`` and write NAME.html (self-contained) and NAME.json (every number shown)."""
    require_report_extra()
    from geodiag.outputs.report.html import render_html

    html_path, json_path = output_paths(output)
    check_writable([html_path, json_path])  # before the analysis, not after it
    opts = opts or ReportOptions()
    report = build_report(paths, read, opts, progress)
    if progress:
        progress("rendering figures and HTML")
    html = render_html(report, style, neighbors_shown=opts.neighbors_shown)
    replaced = [p for p in (html_path, json_path) if p.exists()]
    atomic_write_many({html_path: html, json_path: dumps(report) + "\n"})
    return ReportFiles(html_path, json_path, report, len(html.encode("utf-8")), replaced)
