"""Figures of a :class:`~geodiag.outputs.report.build.Report`, as ``data:`` URIs for ``<img src>``.

Line plots are SVG (text as text, a few kB); cosine maps are PNG reduced to a 256-colour
palette (a vector map of 1,000 tokens is a million rectangles: ~170 MB of SVG).
An SVG inside ``<img>`` can neither run script nor fetch anything, so checkpoint-derived
labels drawn into figures cannot reach the page. matplotlib (the ``report`` extra) is
imported here, lazily, so ``geodiag check`` never pays for it and runs without it.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass

import numpy as np

from geodiag.escape import figure_text
from geodiag.gate.checks import CHECKS
from geodiag.outputs.report.build import Report

STYLE = {
    "font.size": 8,
    "axes.titlesize": 9,
    "axes.labelsize": 8,
    "legend.fontsize": 7,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "svg.fonttype": "none",  # text stays text: smaller, selectable, no glyph paths
    "svg.hashsalt": "geodiag",  # stable ids: the same report gives the same bytes
    # Mathtext stays on (log axes label their ticks with it); names from checkpoints are
    # escaped where they are drawn (geodiag.escape.figure_text), so a "$" in one is a dollar.
}
REFERENCE_COLOR = "#555555"
# Singular values below 1e-8 of the largest are rounding noise for float32 weights (and
# zero for an exact collapse): not drawn, so the log axis keeps the visible range.
SPECTRUM_FLOOR = 1e-8
CMAP = "RdBu_r"  # diverging around cosine 0; one scale, vmin=-1, vmax=1, for every map
# seaborn's "deep" palette, cycled for more series (as seaborn.color_palette("deep", n) does)
PALETTE = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3")
PALETTE += ("#937860", "#da8bc3", "#8c8c8c", "#ccb974", "#64b5cd")


@dataclass(frozen=True)
class FigureFormat:
    """How figures are encoded. ``compact=False`` is the naive baseline ``bench/report.py``
    measures: matplotlib's defaults (lossless RGBA PNG, glyphs as SVG paths)."""

    compact: bool = True
    dpi: int = 110


def _mpl():
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    return matplotlib, Figure


def colors(n: int) -> list[str]:
    return [PALETTE[i % len(PALETTE)] for i in range(n)]


def _heatmap(ax, values: np.ndarray):
    """Cell (i, j) of ``values`` as the unit square at column j, row i from the top, as
    seaborn.heatmap draws it (so level boundaries sit at integer offsets); NaN cells blank.

    One image, not a mesh of cells: a 2,000-token map is 4 million quads to pcolormesh
    (~600 MB while drawing), one 2,000 x 2,000 RGBA array to imshow (16 MB). Where the
    map has more cells than the figure has pixels, matplotlib's default antialiasing
    averages neighbouring cells rather than picking one of them."""
    n_rows, n_cols = values.shape
    cells = np.ma.masked_invalid(values)
    image = ax.imshow(
        cells, vmin=-1, vmax=1, cmap=CMAP, extent=(0, n_cols, n_rows, 0), aspect="equal"
    )
    ax.set_xlim(0, n_cols)
    ax.set_ylim(n_rows, 0)
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)
    return image


def _uri(fig, fmt: str, style: FigureFormat) -> str:
    buf = io.BytesIO()
    if fmt == "svg":
        fig.savefig(buf, format="svg", metadata={"Date": None}, bbox_inches="tight")
        return "data:image/svg+xml;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
    fig.savefig(buf, format="png", dpi=style.dpi, metadata={"Software": None}, bbox_inches="tight")
    data = buf.getvalue()
    if style.compact:
        from PIL import Image

        img = Image.open(io.BytesIO(data)).convert("RGB")
        pal = img.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
        out = io.BytesIO()
        pal.save(out, format="PNG", optimize=True)
        data = out.getvalue()
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def _rc(style: FigureFormat) -> dict:
    rc = dict(STYLE)
    if not style.compact:
        rc["svg.fonttype"] = "path"
    return rc


def _grid(n: int, ncols: int = 3) -> tuple[int, int]:
    cols = min(n, ncols)
    return -(-n // cols), cols


def spectra(report: Report, style: FigureFormat) -> str:
    """Normalized singular spectra (log y) and cumulative energy, one line per matrix."""
    mpl, Figure = _mpl()
    with mpl.rc_context(_rc(style)):
        fig = Figure(figsize=(11, 3.0))
        axes = fig.subplots(1, 3)
        palette = colors(len(report.checkpoints))
        series = []
        for color, e in zip(palette, report.checkpoints, strict=True):
            for m in e.report.matrices:
                name = figure_text(e.label) + (" (output head)" if m.role == "output" else "")
                series.append(
                    (name, m.new, dict(color=color, lw=1.4, ls=":" if m.role == "output" else "-"))
                )
        ref = report.checkpoints[0].report.matrices[0].reference
        if ref is not None:  # None: every row is new (--all-rows-new)
            series.append(
                ("vocabulary reference", ref, dict(color=REFERENCE_COLOR, lw=1.2, ls="--"))
            )
        series = _same_as(series)
        lowest = [1.0, 1.0]
        for name, g, kw in series:
            for k, spec in enumerate((g.uncentered, g.centered)):
                s = np.asarray(spec.singular_values)
                i = np.arange(1, len(s) + 1)
                y = s / s[0] if s[0] > 0 else np.zeros_like(s)
                shown = y >= SPECTRUM_FLOOR
                if shown.any():
                    lowest[k] = min(lowest[k], float(y[shown].min()))
                axes[k].plot(
                    i[shown],
                    y[shown],
                    label=name,
                    marker="o" if shown.sum() == 1 else None,
                    ms=3,
                    **kw,
                )
            s2 = np.asarray(g.uncentered.singular_values) ** 2
            axes[2].plot(np.arange(1, len(s2) + 1), np.cumsum(s2) / s2.sum(), **kw)
        for ax, low, title in (
            (axes[0], lowest[0], "singular values / largest (uncentered)"),
            (axes[1], lowest[1], "singular values / largest (centered)"),
        ):
            ax.set_yscale("log")
            ax.set_ylim(low / 2, 1.6)
            ax.set_title(title)
            ax.set_xlabel("index i")
        axes[2].set_title("cumulative energy (uncentered)")
        axes[2].set_xlabel("number of directions k")
        axes[2].set_ylim(0, 1.02)
        handles, names = axes[0].get_legend_handles_labels()
        fig.tight_layout(rect=(0, 0.1, 1, 1))
        fig.legend(handles, names, loc="lower center", ncol=min(len(names), 6), frameon=False)
        return _uri(fig, "svg", style)


# Two spectra are drawn as one curve when they differ by less than this, in decades of the
# log axes (and in energy on the cumulative one): about 0.4 px of the ~3-inch panels, whose
# y range spans a few decades over ~200 px (issue 50: gti/init hid under gti/sft).
SAME_CURVE = 0.01


def _curves(g) -> list[np.ndarray]:
    """What a series draws: log10 of both normalized spectra, and the cumulative energy."""
    out = []
    for spec in (g.uncentered, g.centered):
        s = np.asarray(spec.singular_values, dtype=np.float64)
        y = s / s[0] if len(s) and s[0] > 0 else np.zeros_like(s)
        out.append(np.log10(np.maximum(y, SPECTRUM_FLOOR)))
    s2 = np.asarray(g.uncentered.singular_values, dtype=np.float64) ** 2
    out.append(np.cumsum(s2) / s2.sum() if s2.sum() > 0 else s2)
    return out


def _same_as(series: list) -> list:
    """``series`` with each one that draws the same curves as an earlier one (within
    :data:`SAME_CURVE`) labelled "NAME (same as EARLIER)": a line under another is hidden."""
    out, drawn = [], []
    for name, g, kw in series:
        mine = _curves(g)
        twin = next(
            (
                other
                for other, theirs in drawn
                if all(a.shape == b.shape for a, b in zip(mine, theirs, strict=True))
                and all(
                    not len(a) or float(np.max(np.abs(a - b))) < SAME_CURVE
                    for a, b in zip(mine, theirs, strict=True)
                )
            ),
            None,
        )
        out.append((name if twin is None else f"{name} (same as {twin})", g, kw))
        drawn.append((name, mine))
    return out


def cosine_maps(report: Report, style: FigureFormat, centered: bool = False) -> str:
    """One cosine heatmap per checkpoint, shared color scale, level boundaries; of the rows
    as they are, or (``centered``) of the rows minus their mean."""
    mpl, Figure = _mpl()
    maps = report.cosine_maps
    rows, cols = _grid(len(maps))
    with mpl.rc_context(_rc(style)):
        fig = Figure(figsize=(3.5 * cols + 0.8, 3.5 * rows + 0.3))
        axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
        for ax, cm in zip(axes, maps, strict=False):
            values = cm._centered if centered else cm._values
            if values is None:  # a map built without its centered view
                values = np.full_like(cm._values, np.nan)
            _heatmap(ax, values)
            bounds = cm.level_starts[1:]
            for b in bounds:
                ax.axhline(b, color="black", lw=0.8)
                ax.axvline(b, color="black", lw=0.8)
            if cm.level_names:
                edges = [*cm.level_starts, cm.n_cells]
                centers = [(a + b) / 2 for a, b in zip(edges[:-1], edges[1:], strict=True)]
                names = [figure_text(name) for name in cm.level_names]
                ax.set_xticks(centers, names)
                ax.set_yticks(centers, names)
                ax.tick_params(length=0)
            view = "centered" if centered else "raw"
            title = f"{figure_text(cm.label)}  ({cm.n_tokens:,} tokens, {view})"
            if centered and not np.isfinite(values).any():
                ax.text(
                    cm.n_cells / 2, cm.n_cells / 2, "identical rows:\nno direction", ha="center"
                )
            if cm.aggregated:
                title += f"\nblock means, {cm.block_size} tokens per block"
            ax.set_title(title)
        for ax in axes[len(maps) :]:
            ax.set_visible(False)
        mappable = axes[0].images[0]
        label = "cosine of rows minus their mean" if centered else "cosine similarity (raw)"
        fig.colorbar(mappable, ax=list(axes[: len(maps)]), shrink=0.8, label=label)
        return _uri(fig, "png", style)


def drift(report: Report, style: FigureFormat) -> str:
    """Histogram of per-token cosine (before vs after), one panel per pair, input matrix."""
    mpl, Figure = _mpl()
    rows, cols = _grid(len(report.drift))
    with mpl.rc_context(_rc(style)):
        fig = Figure(figsize=(3.6 * cols, 2.4 * rows))
        axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
        for ax, pair in zip(axes, report.drift, strict=False):
            h, d = pair.cosine_histograms[0], pair.reports[0].drift
            ax.stairs(h.counts, h.edges, fill=True, color="#4c72b0", alpha=0.8)
            if d.cosine_mean is not None:
                ax.axvline(
                    d.cosine_mean, color="black", ls="--", lw=1, label=f"mean {d.cosine_mean:.3g}"
                )
                ax.legend(loc="upper left", frameon=False)
            ax.set_xlim(-1, 1)
            ax.set_title(figure_text(f"{pair.before} -> {pair.after}"))
            ax.set_xlabel("cosine(before, after) per token")
            ax.set_ylabel("tokens")
        for ax in axes[len(report.drift) :]:
            ax.set_visible(False)
        fig.tight_layout()
        return _uri(fig, "svg", style)


def row_norms(report: Report, style: FigureFormat) -> str:
    """Row-norm histograms of the new tokens per checkpoint, shared x, vocabulary range shaded."""
    mpl, Figure = _mpl()
    entries = report.checkpoints
    rows, cols = _grid(len(entries))
    palette = colors(len(entries))
    with mpl.rc_context(_rc(style)):
        fig = Figure(figsize=(3.6 * cols, 2.2 * rows))
        axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False, sharex=True)).ravel()
        for ax, color, e in zip(axes, palette, entries, strict=False):
            h = e.row_norms[0]
            ref_summary = e.report.matrices[0].reference
            ref = ref_summary.row_norms if ref_summary is not None else None
            if ref is not None:  # None: every row is new (--all-rows-new)
                ax.axvspan(
                    ref.min,
                    ref.max,
                    color=REFERENCE_COLOR,
                    alpha=0.12,
                    lw=0,
                    label="vocabulary min-max",
                )
                ax.axvline(
                    ref.median, color=REFERENCE_COLOR, ls="--", lw=1, label="vocabulary median"
                )
            ax.stairs(h.counts, h.edges, fill=True, color=color, alpha=0.85, label="new tokens")
            ax.set_title(figure_text(e.label))
            ax.set_ylabel("tokens")
        axes[0].legend(loc="upper right", frameon=False)
        for ax in axes[len(entries) :]:
            ax.set_visible(False)
        for ax in axes[max(0, len(entries) - cols) : len(entries)]:
            ax.set_xlabel("L2 norm of the row")
            ax.tick_params(labelbottom=True)
        fig.tight_layout()
        return _uri(fig, "svg", style)


def usage_movement(report: Report, style: FigureFormat) -> str | None:
    """Per checkpoint: each new token's movement against the items that use its code."""
    entries = [
        e
        for e in report.checkpoints
        if (u := e.report.matrices[0].untrained) is not None
        and u._n_items is not None
        and u._movement is not None
    ]
    if not entries:
        return None
    mpl, Figure = _mpl()
    rows, cols = _grid(len(entries))
    with mpl.rc_context(_rc(style)):
        fig = Figure(figsize=(3.6 * cols, 2.6 * rows))
        axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
        for ax, e in zip(axes, entries, strict=False):
            u = e.report.matrices[0].untrained
            codes = u._n_items >= 0
            x, y, bad = u._n_items[codes], u._movement[codes], u._untrained[codes]
            floor = float(y[y > 0].min()) / 2 if (y > 0).any() else 1e-12
            y = np.maximum(y, floor)  # unmoved rows sit on the floor of the log axis
            jitter = np.random.default_rng(0).uniform(-0.2, 0.2, len(x))
            ax.scatter(x[~bad] + jitter[~bad], y[~bad], s=4, color="#4c72b0", label="trained")
            ax.scatter(x[bad] + jitter[bad], y[bad], s=4, color="#c44e52", label="untrained")
            ax.set_xscale("symlog", linthresh=1)
            ax.set_yscale("log")
            ax.set_title(figure_text(e.label))
            ax.set_xlabel("items per code")
            basis = "moved since init" if u.movement_basis == "reference" else "from vocab mean"
            ax.set_ylabel(basis)
        axes[0].legend(loc="lower right", frameon=False)
        for ax in axes[len(entries) :]:
            ax.set_visible(False)
        fig.tight_layout()
        return _uri(fig, "png", style)


def _trajectory_panels(report: Report) -> list[tuple[str, str, str, float | None]]:
    """(title, attribute, x axis, gate threshold) of each trajectory panel with data: one
    per gate check with a label (geodiag.gate.checks.CHECKS), per-level ones when measured."""
    trajs = report.trajectories
    panels = [
        (c.label, c.name, "steps", c.threshold(report.gate_config))
        for c in CHECKS
        if c.label is not None and (c.scope != "level" or any(getattr(t, c.name) for t in trajs))
    ]
    if any(t.code_accuracy for t in trajs):
        panels.append(("code accuracy, per level", "code_accuracy", "steps", None))
        if any(e is not None for t in trajs if t.code_accuracy for e in t.elapsed_s):
            panels.append(("code accuracy vs time", "code_accuracy", "elapsed_s", None))
    return panels


def trajectories(report: Report, style: FigureFormat) -> str:
    """Metrics against training step (and code accuracy against seconds), one line per run;
    per-level metrics have one line style per level; dashed grey: the gate's threshold."""
    mpl, Figure = _mpl()
    panels = _trajectory_panels(report)
    rows, cols = _grid(len(panels))
    palette = colors(len(report.trajectories))
    styles = ["-", "--", ":", "-."]
    with mpl.rc_context(_rc(style)):
        fig = Figure(figsize=(3.8 * cols, 2.7 * rows + 0.4))
        axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
        for ax, (title, attr, xkey, threshold) in zip(axes, panels, strict=False):
            for color, t in zip(palette, report.trajectories, strict=True):
                x = np.array([np.nan if v is None else v for v in getattr(t, xkey)], dtype=float)
                series = getattr(t, attr)
                lines = series.items() if isinstance(series, dict) else [(None, series)]
                for k, (level, values) in enumerate(lines):
                    y = np.array([np.nan if v is None else v for v in values], dtype=float)
                    name = figure_text(t.label if level is None else f"{t.label} {level}")
                    ax.plot(
                        x,
                        y,
                        color=color,
                        ls=styles[k % len(styles)],
                        marker="o",
                        ms=2.5,
                        lw=1.3,
                        label=name,
                    )
                    if attr == "code_accuracy" and level in t.code_accuracy_chance:
                        chance = [v for v in t.code_accuracy_chance[level] if v is not None]
                        if chance:
                            ax.axhline(chance[-1], color=color, lw=0.8, ls=styles[k % 4], alpha=0.4)
            if threshold is not None:
                ax.axhline(threshold, color=REFERENCE_COLOR, lw=1, ls="--", label="gate threshold")
            ax.set_title(title)
            ax.set_xlabel("training step" if xkey == "steps" else "elapsed seconds")
            ax.legend(loc="best", frameon=False, fontsize=6)
        for ax in axes[len(panels) :]:
            ax.set_visible(False)
        fig.tight_layout()
        return _uri(fig, "svg", style)


def render_all(report: Report, style: FigureFormat | None = None) -> dict[str, str]:
    """Every figure of the report, keyed by section."""
    style = style or FigureFormat()
    out = {}
    if report.checkpoints:
        out["spectra"] = spectra(report, style)
        out["cosine_maps_centered"] = cosine_maps(report, style, centered=True)
        out["cosine_maps"] = cosine_maps(report, style)
        out["row_norms"] = row_norms(report, style)
        if (figure := usage_movement(report, style)) is not None:
            out["usage_movement"] = figure
    if report.drift:
        out["drift"] = drift(report, style)
    if report.trajectories:
        out["trajectories"] = trajectories(report, style)
    return out
