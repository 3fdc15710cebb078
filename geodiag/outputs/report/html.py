"""Format a :class:`~geodiag.outputs.report.build.Report` as one self-contained HTML page.

Nothing is computed here. Every number printed in a table is a :class:`Cell` that
carries the JSON pointer (RFC 6901) of its value in ``NAME.json`` as ``data-json``,
so a test (or a reader) can check each one against the JSON. The template escapes
every string (jinja2 autoescape): token strings, paths and titles come from
checkpoints and the command line, and are shown as text, never as markup.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from geodiag.analysis.findings import FINDINGS
from geodiag.escape import html_page
from geodiag.gate.checks import CheckName
from geodiag.jsonio import to_jsonable
from geodiag.metrics.rsa import SIGNIFICANCE
from geodiag.outputs.report.build import Report
from geodiag.outputs.report.figures import FigureFormat, render_all
from geodiag.outputs.report.probe import probe_tables
from geodiag.outputs.text import provenance_lines

TEMPLATES = Path(__file__).parent / "templates"
# Belt and braces: even if something slipped into the page, the browser may load nothing
# but inline styles and data: images.
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def fmt(value: object, digits: int = 4) -> str:
    """How every number is printed: ints as is, floats to ``digits`` significant digits."""
    if value is None:
        return "undefined"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}g}"


@dataclass
class Cell:
    text: str
    ptr: str | None = None  # JSON pointer of the value shown; None for labels and "-"
    cls: str = ""


def code_spans(text: str):
    """``a `cmd` b`` -> markup with ``<code>cmd</code>``; every piece is escaped first."""
    from markupsafe import Markup, escape

    parts = str(text).split("`")
    if len(parts) % 2 == 0:  # unbalanced backticks: show them as they are
        return escape(text)
    return Markup("").join(
        escape(p) if i % 2 == 0 else Markup("<code>%s</code>") % p for i, p in enumerate(parts)
    )


def pointer(*parts: object) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def resolve(data: object, ptr: str) -> object:
    """The value at JSON pointer ``ptr`` in decoded JSON ``data``."""
    for raw in ptr.split("/")[1:]:
        key = raw.replace("~1", "/").replace("~0", "~")
        data = data[int(key)] if isinstance(data, list) else data[key]  # type: ignore[index]
    return data


class _Ptr:
    """Builds cells whose values are read from the JSON itself, by pointer."""

    def __init__(self, data: dict) -> None:
        self.data = data

    def num(self, *parts: object, digits: int = 4) -> Cell:
        ptr = pointer(*parts)
        return Cell(fmt(resolve(self.data, ptr), digits), ptr, "num")


METRIC_ROWS = [  # (label, path inside a GeometrySummary, digits)
    ("rows", ("n_tokens",), 4),
    ("effective rank (centered)", ("centered", "effective_rank"), 4),
    ("  ratio to min(n, d)", ("centered", "effective_rank_ratio"), 4),
    ("effective rank (uncentered)", ("uncentered", "effective_rank"), 4),
    ("stable rank (centered)", ("centered", "stable_rank"), 4),
    ("participation ratio (centered)", ("centered", "participation_ratio"), 4),
    ("top-1 energy share (uncentered)", ("uncentered", "top1_energy_share"), 4),
    ("mean pairwise cosine", ("mean_pairwise_cosine",), 4),
    ("row norm, mean", ("row_norms", "mean"), 4),
    ("row norm, std", ("row_norms", "std"), 4),
    ("spread (RMS distance to centroid)", ("spread",), 4),
    ("spread / vocabulary spread", ("spread_relative",), 4),
]


def metrics_table(report: Report, p: _Ptr) -> tuple[list[str], list[list[Cell]]]:
    """Rows of metrics, one column per (checkpoint, matrix) and the vocabulary reference."""
    columns, header = [], []
    for ci, e in enumerate(report.checkpoints):
        for mi, m in enumerate(e.report.matrices):
            columns.append((ci, mi))
            header.append(e.label + (" (output head)" if m.role == "output" else ""))
    header.append(f"vocabulary reference ({report.checkpoints[0].label})")
    base = ("checkpoints", 0, "report", "matrices", 0)
    rows = []
    for label, path, digits in METRIC_ROWS:
        row = [Cell(label.strip(), cls="sub" if label.startswith(" ") else "")]
        for ci, mi in columns:
            row.append(
                p.num("checkpoints", ci, "report", "matrices", mi, "new", *path, digits=digits)
            )
        if report.checkpoints[0].report.matrices[0].reference is None:  # --all-rows-new
            row.append(Cell("undefined", None, "num"))
        elif path == ("spread_relative",):
            row.append(Cell("1 (def.)", None, "num"))
        else:
            row.append(p.num(*base, "reference", *path, digits=digits))
        rows.append(row)
    for label, key in (
        ("cosine within levels", "within_mean"),
        ("cosine between levels", "between_mean"),
    ):
        row = [Cell(label)]
        for ci, mi in columns:
            m = report.checkpoints[ci].report.matrices[mi]
            row.append(
                p.num("checkpoints", ci, "report", "matrices", mi, "level_cosine", key)
                if m.level_cosine is not None
                else Cell("-", None, "num")
            )
        row.append(Cell("-", None, "num"))
        rows.append(row)
    status = [Cell("gate")]
    for ci, _ in columns:
        v = report.checkpoints[ci].verdict
        status.append(Cell(v.words, None, f"num status {v.status}"))
    status.append(Cell("", None))
    rows.append(status)
    return header, rows


def rsa_table(report: Report, p: _Ptr) -> tuple[list[str], list[list[Cell]], list[str]]:
    """Checkpoints x levels: RSA and p-value per level; why a value is missing, as footnotes."""
    levels: list[str] = []
    for e in report.checkpoints:
        for m in e.report.matrices:
            levels += [lv.name for lv in m.levels if lv.name not in levels]
    notes: list[str] = []
    rows = []
    for ci, e in enumerate(report.checkpoints):
        for mi, m in enumerate(e.report.matrices):
            if not m.levels:
                continue
            row = [Cell(e.label + (" (output head)" if m.role == "output" else ""))]
            by_name = {lv.name: (li, lv) for li, lv in enumerate(m.levels)}
            for name in levels:
                if name not in by_name:
                    row += [Cell("-", None, "num"), Cell("", None, "num")]
                    continue
                li, lv = by_name[name]
                at = ("checkpoints", ci, "report", "matrices", mi, "levels", li, "rsa")
                if lv.rsa is None or lv.rsa.spearman is None:
                    reason = lv.rsa_skip_reason if lv.rsa is None else lv.rsa.undefined_reason
                    reason = f"{e.label}: {reason}"
                    if reason not in notes:
                        notes.append(reason)
                    what = "skipped" if lv.rsa is None else "undefined"
                    row += [
                        Cell(f"{what} [{notes.index(reason) + 1}]", None, "num miss"),
                        Cell("", None, "num"),
                    ]
                else:
                    row += [p.num(*at, "spearman", digits=3), p.num(*at, "p_value", digits=3)]
            rows.append(row)
    return levels, rows, notes


def drift_levels(report: Report) -> list[str]:
    names = {name for pair in report.drift for r in pair.reports for name in r.levels}
    return sorted(names, key=lambda s: (len(s), s))


def drift_rows(report: Report, p: _Ptr, levels: list[str]) -> list[list[Cell]]:
    """One row per (pair, matrix); per-level structure RSA in the columns named by ``levels``."""
    out = []
    for pi, pair in enumerate(report.drift):
        for ri, r in enumerate(pair.reports):
            at = ("drift", pi, "reports", ri, "drift")
            rsa = r.drift.structure_rsa
            row = [
                Cell(f"{pair.before} -> {pair.after}", cls="pair"),
                Cell(r.matrix),
                p.num("drift", pi, "reports", ri, "n_tokens"),
                p.num(*at, "cosine_mean"),
                p.num(*at, "cosine_median"),
                p.num(*at, "cosine_min"),
                p.num(*at, "relative_change"),
            ]
            if rsa.spearman is None:
                row += [Cell("undefined", None, "num"), Cell("", None, "num")]
            else:
                row += [
                    p.num(*at, "structure_rsa", "spearman", digits=3),
                    p.num(*at, "structure_rsa", "p_value", digits=3),
                ]
            for name in levels:
                lv = r.levels.get(name)
                if lv is None or lv.structure_rsa.spearman is None:
                    row.append(Cell("-" if lv is None else "undefined", None, "num"))
                else:
                    row.append(
                        p.num(
                            "drift",
                            pi,
                            "reports",
                            ri,
                            "levels",
                            name,
                            "structure_rsa",
                            "spearman",
                            digits=3,
                        )
                    )
            out.append(row)
    return out


def neighbor_table(report: Report, p: _Ptr, shown: int, top: int = 3) -> list[dict]:
    """A few new tokens (spread evenly over each checkpoint's sample) x checkpoints: the
    ``top`` nearest original tokens with their cosine. All k neighbours are in the JSON."""
    order: list[int] = []
    tokens: dict[int, str] = {}
    for e in report.checkpoints:
        nb = e.report.matrices[0].neighbors
        for i in sorted(
            {round(j * (len(nb) - 1) / max(shown - 1, 1)) for j in range(min(shown, len(nb)))}
        ):
            if nb[i].id not in tokens:
                order.append(nb[i].id)
                tokens[nb[i].id] = nb[i].token
    rows = []
    for tid in order:
        cells = []
        for ci, e in enumerate(report.checkpoints):
            found = [
                (ti, tn) for ti, tn in enumerate(e.report.matrices[0].neighbors) if tn.id == tid
            ]
            if not found:
                cells.append([])
                continue
            ti, tn = found[0]
            at = ("checkpoints", ci, "report", "matrices", 0, "neighbors", ti, "nearest")
            cells.append(
                [
                    (nb.token, p.num(*at, ni, "cosine", digits=2))
                    for ni, nb in enumerate(tn.nearest[:top])
                ]
            )
        rows.append({"token": tokens[tid], "cells": cells})
    return rows


SHOWN_FINDING_ROWS = 20  # flagged tokens per checkpoint in the page; the JSON has more


def _used_by(t) -> str:
    """What feeds a flagged token (item IDs, --data files, the chat template)."""
    if t.uses is None:
        return "-"
    if not t.uses:
        return "nothing" if t.usage_known else "unknown"
    return "; ".join(f"{c}x {name}" for name, c in t.used_by.items())


def findings_tables(report: Report, p: _Ptr) -> list[dict]:
    """Per checkpoint and matrix: its first flagged tokens (token, id, level/code, items
    per code, movement, findings), each number read from the JSON by pointer."""
    out = []
    for ci, e in enumerate(report.checkpoints):
        for mi, m in enumerate(e.report.matrices):
            u = m.untrained
            if u is None or not u.tokens:
                continue
            at = ("checkpoints", ci, "report", "matrices", mi, "untrained")
            rows = []
            for ti, t in enumerate(u.tokens[:SHOWN_FINDING_ROWS]):
                code = "-" if t.level is None else f"{t.level} {t.code}"
                rows.append(
                    [
                        Cell(t.token, cls="tok"),
                        p.num(*at, "tokens", ti, "id"),
                        Cell(code),
                        Cell("-", None, "num")
                        if t.n_items is None
                        else p.num(*at, "tokens", ti, "n_items"),
                        Cell("-", None, "num")
                        if t.movement is None
                        else p.num(*at, "tokens", ti, "movement", digits=3),
                        Cell(_used_by(t)),
                        Cell(", ".join(FINDINGS[k] for k in t.findings)),
                    ]
                )
            out.append(
                {
                    "label": e.label + (" (output head)" if m.role == "output" else ""),
                    "n_flagged": p.num(*at, "n_flagged"),
                    "n_untrained": p.num(*at, "n_untrained"),
                    "basis": u.movement_basis,
                    "rows": rows,
                }
            )
    return out


def finding_counts(report: Report, p: _Ptr) -> list[list[Cell]]:
    """Per checkpoint and matrix, one row of counts: new tokens, untrained, of them dead
    codes, barely moved since the reference, at the vocabulary mean, flagged for anything.
    "none": measured, no token; "-": not measurable (no reference, no item map)."""
    rows = []
    for ci, e in enumerate(report.checkpoints):
        for mi, m in enumerate(e.report.matrices):
            u = m.untrained
            if u is None:
                continue
            at = ("checkpoints", ci, "report", "matrices", mi, "untrained")

            def count(key: str, measured: bool, at=at, u=u) -> Cell:
                if getattr(u, key) is not None:
                    return p.num(*at, key, "size")
                return Cell("none" if measured else "-", None, "num miss")

            rows.append(
                [
                    Cell(e.label + (" (output head)" if m.role == "output" else "")),
                    Cell(e.verdict.words, None, f"status {e.verdict.status}"),
                    p.num("checkpoints", ci, "report", "matrices", mi, "n_new"),
                    p.num(*at, "n_untrained"),
                    _gate_count(e, ci, m.role, p),
                    count("dead_codes", u._n_items is not None),
                    count("barely_moved", u.movement is not None),
                    count("at_vocabulary_mean", True),
                    p.num(*at, "n_flagged"),
                ]
            )
    return rows


def _gate_count(e, ci: int, role: str, p: _Ptr) -> Cell:
    """The untrained rows the gate's n_untrained check counts on matrix ``role`` (those
    something feeds, or may): the number ``geodiag check`` prints and judges."""
    for k, c in enumerate(e.gate.checks):
        if c.name == CheckName.N_UNTRAINED and c.matrix == role and c.value is not None:
            return p.num("checkpoints", ci, "gate", "checks", k, "value")
    return Cell("-", None, "num miss")


def codebook_rows(report: Report, p: _Ptr) -> list[list[Cell]]:
    """Per checkpoint with a sidecar's items and per level: usage of the codes."""
    rows = []
    for ci, e in enumerate(report.checkpoints):
        h = e.report.codebook
        if h is None:
            continue
        at = ("checkpoints", ci, "report", "codebook")
        for li, lv in enumerate(h.levels):
            rows.append(
                [
                    Cell(e.label if li == 0 else ""),
                    Cell(lv.name),
                    p.num(*at, "levels", li, "utilization", digits=3),
                    p.num(*at, "levels", li, "perplexity", digits=4),
                    p.num(*at, "levels", li, "normalized_entropy", digits=3),
                    p.num(*at, "levels", li, "max_code_share", digits=3),
                    p.num(*at, "levels", li, "n_dead"),
                    p.num(*at, "n_colliding_items") if li == 0 else Cell("", None),
                ]
            )
    return rows


TRAJECTORY_COLUMNS = [  # (header, attribute of Trajectory)
    ("effective-rank ratio", CheckName.EFFECTIVE_RANK_RATIO),
    ("spread ratio", CheckName.SPREAD_RELATIVE),
    ("mean cosine", CheckName.MEAN_PAIRWISE_COSINE),
]


def trajectory_table(report: Report, p: _Ptr) -> tuple[list[str], list[list[Cell]]]:
    """One row per run: its steps, and first and last value of each metric (all in the JSON)."""
    levels: list[str] = []
    for t in report.trajectories:
        levels += [name for name in t.rsa if name not in levels]
    header = ["run", "source", "points", "first step", "last step"]
    for name, _ in TRAJECTORY_COLUMNS:
        header += [f"{name}, first", "last"]
    header += [f"RSA {name}, last" for name in levels]
    rows = []
    for ti, t in enumerate(report.trajectories):
        last = len(t.steps) - 1
        row = [Cell(t.label), Cell(t.source, cls="mono"), Cell(str(len(t.steps)))]
        row += [p.num("trajectories", ti, "steps", 0), p.num("trajectories", ti, "steps", last)]
        for _, attr in TRAJECTORY_COLUMNS:
            row += [p.num("trajectories", ti, attr, 0), p.num("trajectories", ti, attr, last)]
        for name in levels:
            row.append(
                p.num("trajectories", ti, "rsa", name, last, digits=3)
                if name in t.rsa
                else Cell("-", None, "num")
            )
        rows.append(row)
    return header, rows


# On a phone (<= 600 px) each figure is shown this wide, scrolled sideways, not shrunk to the
# page: an 11-inch figure (1,056 px at 96 px/in) shrunk to 366 px drew its 7-9 pt text 3-4 px
# tall (issue 50); at 800 px its smallest text (the 7 pt legend, 9.3 px native) is 7 px.
FIGURE_MIN_PX = 800


def render_html(report: Report, style: FigureFormat | None = None, neighbors_shown: int = 6) -> str:
    """The report page: inline CSS, figures as data URIs, no script, no external reference."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,  # every {{ }} is escaped, whatever the file extension
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["fmt"] = fmt
    env.filters["code_spans"] = code_spans
    env.filters["provenance_lines"] = provenance_lines
    data = to_jsonable(report)
    assert isinstance(data, dict)
    p = _Ptr(data)
    header, metric_rows = metrics_table(report, p) if report.checkpoints else ([], [])
    traj_header, traj_rows = trajectory_table(report, p)
    rsa_levels, rsa_rows, rsa_notes = rsa_table(report, p)
    levels = drift_levels(report)
    page = env.get_template("report.html.j2").render(
        r=report,
        csp=CSP,
        figures=render_all(report, style),
        metric_header=header,
        metric_rows=metric_rows,
        rsa_levels=rsa_levels,
        rsa_rows=rsa_rows,
        rsa_notes=rsa_notes,
        probes=probe_tables(report, p.num, Cell),
        drift_rows=drift_rows(report, p, levels),
        drift_levels=levels,
        neighbors=neighbor_table(report, p, neighbors_shown),
        sampled=[e.label for e in report.checkpoints if e.report.matrices[0].neighbors_sampled],
        pointer=pointer,
        gate=data["gate_config"],
        traj_header=traj_header,
        traj_rows=traj_rows,
        findings=findings_tables(report, p),
        finding_counts=finding_counts(report, p),
        codebook_rows=codebook_rows(report, p),
        significance=f"{SIGNIFICANCE:g}",
        figure_min_px=FIGURE_MIN_PX,
    )
    return html_page(page)  # a lone surrogate in a token: autoescape leaves it, UTF-8 cannot
