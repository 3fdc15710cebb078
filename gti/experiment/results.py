"""The results table: every arm's metrics per split, mean and spread over seeds.

Computed first (:func:`summarize`, plain dicts ready for strict JSON), rendered
second (:func:`to_markdown`). The spread is the sample standard deviation
(ddof=1) over seeds; with one seed it is ``None`` and the table shows the mean only.
"""

from __future__ import annotations

import statistics

RESULTS_FORMAT = "gti.experiment.results"


def summarize(
    evals: dict[str, dict[int, dict]], ks: list[int], splits: list[str]
) -> dict[str, object]:
    """``evals[arm][seed]`` = a ``gti evaluate`` JSON -> per arm, split and metric:
    mean, std, n and the per-seed values."""
    arms: dict[str, object] = {}
    for arm, by_seed in evals.items():
        seeds = sorted(by_seed)
        per_split: dict[str, object] = {}
        for split in splits:
            metrics: dict[str, object] = {}
            for name in metric_names(ks):
                values = [float(by_seed[s]["splits"][split]["metrics"][name]) for s in seeds]
                metrics[name] = {
                    "mean": statistics.fmean(values),
                    "std": statistics.stdev(values) if len(values) > 1 else None,
                    "n": len(values),
                    "values": values,
                }
            users = {by_seed[s]["splits"][split]["n_users"] for s in seeds}
            per_split[split] = {"n_users": sorted(users), "metrics": metrics}
        arms[arm] = {"seeds": seeds, "splits": per_split}
    return {"format": RESULTS_FORMAT, "format_version": 1, "ks": ks, "splits": splits, "arms": arms}


def metric_names(ks: list[int]) -> list[str]:
    return [f"recall@{k}" for k in ks] + [f"ndcg@{k}" for k in ks]


def to_markdown(summary: dict, title: str, notes: list[str] | None = None) -> str:
    """One table per split: arms as rows, Recall@K then NDCG@K as columns."""
    names = metric_names(summary["ks"])
    header = ["arm", "seeds", *[n.replace("recall", "R").replace("ndcg", "N") for n in names]]
    lines = [f"# {title}", ""]
    for split in summary["splits"]:
        lines += [f"## {split}", "", "| " + " | ".join(header) + " |"]
        lines.append("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")
        for arm, res in summary["arms"].items():
            cells = [arm, str(len(res["seeds"]))]
            for name in names:
                m = res["splits"][split]["metrics"][name]
                cell = f"{m['mean']:.4f}"
                if m["std"] is not None:
                    cell += f" ± {m['std']:.4f}"
                cells.append(cell)
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    for note in notes or []:
        lines.append(f"- {note}")
    return "\n".join(lines).rstrip() + "\n"
