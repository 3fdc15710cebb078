"""The last screen of ``gti experiment``: what the geodiag report says of each arm.

Computed from the report's JSON (``report.json``, written beside ``report.html``), so it
says exactly what the report's verdict cards say: per arm and stage the gate status and
the diagnosis (cause and remedy), then the per-token findings (untrained rows, dead
codes, rows that barely moved since the init), then where the report is.

Recall is on this screen only when enough users were evaluated for it to mean
something (:data:`RECALL_MIN_USERS`); below that, the screen says so and points to the
committed study, which has the intervals and the most-popular baseline.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass
from pathlib import Path

# With n users, Recall@K is a proportion of hits: its 95% interval is about
# +-2 sqrt(p (1 - p) / n); at p = 0.05 and n = 200 that is +-0.03, already the size of
# the differences between inits the paper reports. Below it a recall table is noise.
RECALL_MIN_USERS = 200
STUDY = "reports/ml100k-study/README.md"
WIDTH = 100


@dataclass(frozen=True)
class Row:
    """One checkpoint of the report, named as the experiment named it."""

    arm: str
    stage: str  # "init" or the SFT stage's name, e.g. "3 SFT steps (smoke)"
    status: str  # "pass" | "warn" | "fail"
    sentence: str
    n_new: int
    n_untrained: int
    dead_codes: int | None  # None: not measurable (no item map)
    barely_moved: int | None  # None: no init to measure from
    geometry: str = ""  # the figures behind the verdict: mean cosine, rank, RSA per level


def sft_stage_name(steps: int, batch_size: int) -> str:
    """What "after SFT" is: a smoke run is named as one, so nobody reads it as trained."""
    name = f"{steps} SFT steps x {batch_size}"
    return f"{name} (smoke)" if steps < 100 else name


def rows_of(report: dict, names: dict[str, tuple[str, str]]) -> list[Row]:
    """``names``: checkpoint path (as the report lists it) -> (arm, stage)."""
    out = []
    for c in report["checkpoints"]:
        path = c["report"]["path"]
        arm, stage = names.get(path, (c["label"], ""))
        m = c["report"]["matrices"][0]
        u = m.get("untrained") or {}

        def size(key: str, measured: bool, u=u) -> int | None:
            group = u.get(key)
            return group["size"] if group else (0 if measured else None)

        out.append(
            Row(
                geometry=_geometry(m),
                arm=arm,
                stage=stage,
                status=c["verdict"]["status"],
                sentence=c["verdict"]["sentence"].replace("`", ""),
                n_new=m["n_new"],
                n_untrained=u.get("n_untrained", 0),
                dead_codes=size("dead_codes", bool(u.get("usage_movement"))),
                barely_moved=size("barely_moved", u.get("movement") is not None),
            )
        )
    return out


def _geometry(m: dict) -> str:
    """ "mean cosine 0.86, effective rank 400, RSA a 0.09 (p 0.005), ..." of a matrix."""
    g = m["new"]
    cos = g.get("mean_pairwise_cosine")
    parts = [
        "mean cosine " + ("undefined" if cos is None else f"{cos:.3f}"),
        f"effective rank {g['centered']['effective_rank']:.0f}",
    ]
    rsa = []
    for lv in m.get("levels", []):
        r = lv.get("rsa") or {}
        if r.get("spearman") is None:
            rsa.append(f"{lv['name']} undefined")
        else:
            rsa.append(f"{lv['name']} {r['spearman']:.3f} p={r['p_value']:.2g}")
    if rsa:
        parts.append("RSA " + ", ".join(rsa))
    return ", ".join(parts)


def _n(x: int | None) -> str:
    return "-" if x is None else str(x)


def screen(rows: list[Row], report_html: Path, recall_note: str | None) -> str:
    """The verdict per arm and stage, the per-token counts, the recall note, the report."""
    lines = ["Geometry of the new tokens: the geodiag report's verdict per arm and stage", ""]
    for r in rows:
        lines.append(f"{r.status.upper():<4}  {r.arm}, {r.stage}")
        if r.geometry:
            lines += textwrap.wrap(
                r.geometry, WIDTH, initial_indent=" " * 6, subsequent_indent=" " * 8
            )
        lines += textwrap.wrap(r.sentence, WIDTH, initial_indent=" " * 6, subsequent_indent=" " * 6)
    names = [f"{r.arm}, {r.stage}" for r in rows]
    width = max(len(n) for n in names)
    header = ("untrained", "of them dead codes", "barely moved since init")
    lines += ["", f"{'Per-token findings':<{width}}  " + "  ".join(header)]
    for name, r in zip(names, rows, strict=True):
        cells = (f"{r.n_untrained} of {r.n_new}", _n(r.dead_codes), _n(r.barely_moved))
        padded = "  ".join(f"{c:>{len(h)}}" for c, h in zip(cells, header, strict=True))
        lines.append(f"{name:<{width}}  {padded}")
    if recall_note:
        lines += ["", *textwrap.wrap(recall_note, WIDTH)]
    lines += ["", f"report: {report_html}"]
    return "\n".join(lines)


def recall_note(n_users: int | None, results_md: Path | None) -> str | None:
    """None when the recall table is worth reading (the CLI prints it), else why not."""
    if n_users is not None and n_users < RECALL_MIN_USERS:
        where = f" ({results_md} keeps it)" if results_md is not None else ""
        return (
            f"Recall left out: {n_users} evaluated users make Recall@K noise (fewer than "
            f"{RECALL_MIN_USERS}; one hit moves Recall@10 by {1 / n_users:.2f}){where}. "
            f"Recall with intervals beside the most-popular baseline: {STUDY}."
        )
    return None


def load_screen(
    report_json: Path,
    names: dict[str, tuple[str, str]],
    n_users: int | None,
    results_md: Path | None,
) -> str:
    """:func:`screen` of a written report (``report.json`` beside ``report.html``)."""
    report = json.loads(report_json.read_text())
    note = recall_note(n_users, results_md)
    return screen(rows_of(report, names), report_json.with_suffix(".html"), note)
