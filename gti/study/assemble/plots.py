"""The study's figures, one function each, from a results document (``collect``'s
dict) and, for the spectra, the runs' geometry.json."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gti.study.assemble.collect import CURVE_METRICS
from gti.study.assemble.inputs import read_runs

# The geometry panels, left to right ("rsa": one line per level).
GEOMETRY_PANELS = (
    "effective_rank",
    "centered_effective_rank",
    "spread_relative",
    "mean_cosine",
    "rsa",
)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> Path:
    """Lay out, write and close one figure; returns its path."""
    plt = _pyplot()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _finish(ax, ylabel: str | None, *, xlabel: str = "SFT examples", legend: int = 7) -> None:
    """Axis labels, a light grid and the legend, as every panel has them."""
    ax.set_xlabel(xlabel)
    if ylabel is not None:
        ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=legend)


def _curve_axes():
    """One axis per curve metric, side by side."""
    fig, axes = _pyplot().subplots(1, len(CURVE_METRICS), figsize=(6 * len(CURVE_METRICS), 4.2))
    return fig, zip(np.atleast_1d(axes), CURVE_METRICS, strict=True)


def _x(point: dict) -> float:
    """A curve point's abscissa: epochs where the study measures in epochs, else examples."""
    return point["examples"] if point.get("epochs") is None else point["epochs"]


def _x_label(res: dict) -> str:
    arms = list(res["arms"].values())
    in_epochs = bool(arms) and all(p.get("epochs") is not None for p in arms[0]["curve"])
    return "SFT epochs" if in_epochs else "SFT examples"


def learning_curves(res: dict, path: Path) -> Path:
    """Each arm's curve-split metric against SFT examples with its 95% band, and each
    baseline as a dashed level."""
    fig, panels = _curve_axes()
    for ax, metric in panels:
        for arm, a in res["arms"].items():
            x = [_x(p) for p in a["curve"]]
            y = [p["metrics"][metric]["estimate"] for p in a["curve"]]
            lo = [p["metrics"][metric]["low"] for p in a["curve"]]
            hi = [p["metrics"][metric]["high"] for p in a["curve"]]
            (line,) = ax.plot(x, y, marker="o", label=f"{arm} ({len(a['seeds'])} seed(s))")
            ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.15)
        split = next(iter(res["arms"].values()))["curve_split"] if res["arms"] else "valid"
        for i, (b, entry) in enumerate(res["baselines"].items()):
            if split in entry:
                ax.axhline(
                    entry[split]["metrics"][metric]["estimate"],
                    ls="--",
                    lw=1,
                    color=f"C{7 + i % 3}",
                    label=f"baseline: {b}",
                )
        _finish(ax, f"{split} {metric}", xlabel=_x_label(res))
    return _save(fig, path)


def paired_curves(res: dict, path: Path) -> Path:
    """Each pair's A - B along the curve with its 95% band, against 0."""
    fig, panels = _curve_axes()
    for ax, metric in panels:
        for name, rows in res["paired_curve"].items():
            x = [r["examples"] for r in rows]
            d = [r["metrics"][metric]["difference"] for r in rows]
            (line,) = ax.plot(
                x,
                [c["estimate"] for c in d],
                marker="o",
                label=f"{name} ({len(rows[-1]['seeds'])} seed(s))",
            )
            ax.fill_between(
                x,
                [c["low"] for c in d],
                [c["high"] for c in d],
                color=line.get_color(),
                alpha=0.15,
            )
        ax.axhline(0, color="k", lw=0.8)
        _finish(ax, f"paired difference in {metric} (95% interval)")
    return _save(fig, path)


def geometry(res: dict, path: Path) -> Path:
    """One panel per figure of GEOMETRY_PANELS: each arm's mean over seeds against SFT
    examples (RSA: one line style per level)."""
    fig, axes = _pyplot().subplots(
        1, len(GEOMETRY_PANELS), figsize=(4.5 * len(GEOMETRY_PANELS), 3.8)
    )
    for ax, key in zip(axes, GEOMETRY_PANELS, strict=True):
        for i, (arm, a) in enumerate(res["arms"].items()):
            g = a["geometry"]
            x = [r["examples"] for r in g]
            if key == "rsa":
                for j, lv in enumerate(g[0]["rsa"] if g else {}):
                    y = [np.nan if r["rsa"][lv] is None else r["rsa"][lv]["mean"] for r in g]
                    ax.plot(
                        x,
                        y,
                        marker="o",
                        color=f"C{i}",
                        ls=("-", "--", ":")[j % 3],
                        label=f"{arm} {lv}",
                    )
            else:
                y = [np.nan if r[key] is None else r[key]["mean"] for r in g]
                ax.plot(x, y, marker="o", color=f"C{i}", label=arm)
        ax.set_title(key.replace("_", " ") + (" (per level)" if key == "rsa" else ""))
        _finish(ax, None, legend=6)
    return _save(fig, path)


def spectra(folder: Path, path: Path) -> Path:
    """The normalized singular spectrum of each arm's final checkpoint (first seed), with
    the original vocabulary's sample for scale."""
    fig, ax = _pyplot().subplots(figsize=(6, 4.2))
    for i, (arm, runs) in enumerate(read_runs(folder).items()):
        last = runs[0].geometry()[str(runs[0].milestones[-1])]
        s = np.asarray(last["singular_values"])
        ax.semilogy(np.arange(1, len(s) + 1), s / s[0], color=f"C{i}", label=arm)
        if i == 0:
            r = np.asarray(last["reference_singular_values"])
            ax.semilogy(np.arange(1, len(r) + 1), r / r[0], "k:", label="original vocabulary")
    _finish(ax, "singular value / largest (final checkpoint, first seed)", xlabel="index")
    return _save(fig, path)


def plot(res: dict, folder: Path) -> list[Path]:
    """learning_curves.png, learning_curves_paired.png (when two arms of PAIRS ran),
    geometry.png, spectra.png (from ``res`` and the runs' files) into ``folder``."""
    folder = Path(folder)
    written = [learning_curves(res, folder / "learning_curves.png")]
    if res.get("paired_curve"):
        written.append(paired_curves(res, folder / "learning_curves_paired.png"))
    if res["arms"]:
        written.append(geometry(res, folder / "geometry.png"))
        written.append(spectra(folder, folder / "spectra.png"))
    return written
