"""Draw structure curves (``train_log.jsonl`` lines with a ``structure`` record) to PNG:
RSA per level and held-out code accuracy, against step and against training seconds,
one line style per run.

    python -m gti.init.curve LABEL=RUN/train_log.jsonl [LABEL=...] -o curve.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def read_curve(path: Path) -> list[dict[str, object]]:
    """The structure entries of a train log, in step order."""
    entries = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        if "structure" in entry:
            entries.append(entry)
    return entries


def plot_curves(runs: dict[str, list[dict[str, object]]], out: Path) -> Path:
    """A 2 x 2 figure: RSA a/b/c and accuracy (a, full SID), vs step and vs seconds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7), sharey="row")
    styles = ["-", "--", ":", "-."]
    colors = {"a": "tab:blue", "b": "tab:orange", "c": "tab:green", "sid": "tab:red"}
    for k, (label, curve) in enumerate(runs.items()):
        ls = styles[k % len(styles)]
        steps = [e["step"] for e in curve]
        secs = [e["elapsed_s"] for e in curve]
        for col, xs in enumerate((steps, secs)):
            for level in ("a", "b", "c"):
                ys = [e["structure"]["rsa"][level] for e in curve]  # type: ignore[index]
                axes[0, col].plot(
                    xs,
                    [float("nan") if y is None else y for y in ys],
                    ls,
                    color=colors[level],
                    label=f"{label}: RSA {level}",
                )
            for key in ("a", "sid"):
                ys = [e["structure"]["code_accuracy"][key] for e in curve]  # type: ignore[index]
                axes[1, col].plot(xs, ys, ls, color=colors[key], label=f"{label}: acc {key}")
        chance = curve[-1]["structure"]["code_accuracy_chance"]["a"] if curve else None  # type: ignore[index]
        if chance is not None and k == 0:
            for col in (0, 1):
                axes[1, col].axhline(chance, color="grey", lw=0.8, label="chance (level a)")
    for col, xlabel in enumerate(("step", "training seconds")):
        axes[1, col].set_xlabel(xlabel)
    axes[0, 0].set_ylabel("Spearman RSA vs codebook")
    axes[1, 0].set_ylabel("held-out code accuracy")
    axes[0, 1].legend(fontsize=7, loc="upper left")
    axes[1, 1].legend(fontsize=7, loc="upper left")
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("runs", nargs="+", help="LABEL=path/to/train_log.jsonl")
    ap.add_argument("-o", "--out", type=Path, required=True)
    args = ap.parse_args()
    runs = {}
    for spec in args.runs:
        label, _, path = spec.partition("=")
        runs[label] = read_curve(Path(path or label))
    print(plot_curves(runs, args.out))


if __name__ == "__main__":
    main()
