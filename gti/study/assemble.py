"""``assemble``: results.md, results.json and the plots of a study, from its committed
small files alone (``runs/*/`` and ``baselines/*/``): no weights, no model, no data.

Every number is recomputed from the per-user rankings (``gti.evaluate.rankings``)
with the statistics of ``gti.evaluate.stats``: per arm and milestone, the mean over
seeds and users with a two-way bootstrap interval; baselines with a bootstrap over
users; paired differences (``PAIRS``: gti - mean, - random, - description-mean;
gti+lcrec - lcrec; lcrec - mean) with interval and sign-flip test, on the final splits
and at every milestone of the learning curve; every arm against every baseline on
the same users, with a verdict (above / below / not distinguishable) from the interval.
Computed first (:func:`collect`, a strict-JSON dict), rendered second
(:func:`to_markdown`, :func:`plot`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.jsonio import read_json
from gti.evaluate.rankings import (
    RANKING_KS,
    Rankings,
    check_aligned,
    load_rankings,
    per_user_metrics,
)
from gti.evaluate.stats import interval, paired_test
from gti.experiment.layout import study_runs

FORMAT = "gti.study.results"
KS = RANKING_KS
CURVE_METRICS = ("recall@10", "recall@20")
# (A, B) pairs reported as A - B when both arms ran: GTI against each other init with
# plain SFT, and with the LC-Rec task mix on both sides (the paper's two comparisons).
PAIRS = (
    ("gti", "mean"),
    ("gti", "random"),
    ("gti", "description-mean"),
    ("gti+lcrec", "lcrec"),
    ("lcrec", "mean"),
)
GEOMETRY = ("effective_rank", "spread_relative", "mean_cosine", "rsa")


def _runs(root: Path) -> dict[str, list[dict]]:
    """arm -> run.json documents (complete runs), sorted by seed."""
    arms: dict[str, list[dict]] = {}
    for path in sorted(study_runs(root).glob("*/run.json")):
        doc = read_json(path)
        if doc.get("status") != "complete":
            continue
        doc["_dir"] = path.parent
        arms.setdefault(doc["arm"], []).append(doc)
    return {a: sorted(v, key=lambda d: d["seed"]) for a, v in arms.items()}


def _stack(lists: list[Rankings], ks=KS) -> dict[str, np.ndarray]:
    """(n_seeds, n_users) per metric; every list must cover the same users and targets."""
    for r in lists[1:]:
        check_aligned(lists[0], r, "per-seed rankings")
    per = [per_user_metrics(r, ks) for r in lists]
    return {m: np.stack([p[m] for p in per]) for m in per[0]}


def _means(m: dict[str, np.ndarray], row: int) -> dict[str, float]:
    """Point estimates of one seed (row ``row`` of ``_stack``'s arrays) over its users."""
    return {k: float(v[row].mean()) for k, v in m.items()}


def _ci(x: np.ndarray, n_resamples: int, seed: int) -> dict[str, float]:
    return interval(x, n_resamples=n_resamples, seed=seed).to_dict()


def collect(root: Path, *, n_resamples: int = 10_000, seed: int = 0) -> dict[str, object]:
    root = Path(root)
    runs = _runs(root)
    if not runs and not (root / "baselines").is_dir():
        raise InputError(root, "holds neither complete runs (runs/*/run.json) nor baselines/")
    out: dict[str, object] = {
        "format": FORMAT,
        "format_version": 1,
        "n_resamples": n_resamples,
        "bootstrap_seed": seed,
        "ks": list(KS),
    }

    baselines: dict[str, dict] = {}
    baseline_lists: dict[tuple[str, str], Rankings] = {}  # (baseline, split) -> lists
    for folder in sorted((root / "baselines").glob("*/")):
        entry = {}
        for split in ("valid", "test"):
            p = folder / f"{split}.rankings.json"
            if p.is_file():
                r = load_rankings(p)
                baseline_lists[(folder.name, split)] = r
                m = _stack([r])
                entry[split] = {
                    "n_users": len(r.users),
                    "metrics": {k: _ci(v, n_resamples, seed) for k, v in m.items()},
                }
        if entry:
            baselines[folder.name] = entry
    out["baselines"] = baselines

    arms: dict[str, dict] = {}
    finals: dict[str, dict[str, dict[int, Rankings]]] = {}  # arm -> split -> seed -> lists
    curves: dict[str, dict[int, dict[int, Rankings]]] = {}  # arm -> step -> seed -> lists
    for arm, docs in runs.items():
        seeds = [d["seed"] for d in docs]
        steps = docs[0]["milestones"]
        per_step = docs[0]["examples_per_step"]
        split = docs[0]["curve_split"]
        curve = []
        curves[arm] = {}
        per_seed: dict[str, dict] = {str(s): {"curve": [], "final": {}} for s in seeds}
        for step in steps:
            by_seed = {
                d["seed"]: load_rankings(d["_dir"] / f"curve/step-{step:06d}.{split}.rankings.json")
                for d in docs
            }
            curves[arm][step] = by_seed
            m = _stack(list(by_seed.values()))
            curve.append(
                {
                    "step": step,
                    "examples": step * per_step,
                    "n_users": m["recall@10"].shape[1],
                    "metrics": {k: _ci(v, n_resamples, seed) for k, v in m.items()},
                }
            )
            for i, s in enumerate(seeds):
                per_seed[str(s)]["curve"].append({"step": step, **_means(m, i)})
        final = {}
        finals[arm] = {}
        for fs in docs[0]["final_splits"]:
            by_seed = {
                d["seed"]: load_rankings(d["_dir"] / "final" / f"{fs}.rankings.json") for d in docs
            }
            finals[arm][fs] = by_seed
            m = _stack(list(by_seed.values()))
            final[fs] = {
                "n_users": m["recall@10"].shape[1],
                "metrics": {k: _ci(v, n_resamples, seed) for k, v in m.items()},
            }
            for i, s in enumerate(seeds):
                per_seed[str(s)]["final"][fs] = _means(m, i)
        geometry = _geometry(docs)
        arms[arm] = {
            "seeds": seeds,
            "curve_split": split,
            "curve": curve,
            "final": final,
            "per_seed": per_seed,
            "geometry": geometry,
            "stage_seconds": {str(d["seed"]): d["stage_seconds"] for d in docs},
            "sft_examples_per_s": [_examples_per_s(d) for d in docs],
            "tokens_per_example": docs[0].get("tokens_per_example"),
            "commands": sorted({d["command"] for d in docs}),
            "machines": [d["machine"] for d in docs],
        }
    out["arms"] = arms
    out["paired"] = _paired(finals, runs, n_resamples, seed)
    out["paired_curve"] = _paired_curve(curves, arms, n_resamples, seed)
    out["versus_baselines"] = _versus_baselines(
        curves, finals, arms, baseline_lists, n_resamples, seed
    )
    out["geometry_intervals"] = _geometry_intervals(root, runs)
    return out


def _geometry_intervals(root: Path, runs: dict[str, list[dict]]) -> dict | None:
    """geometry_intervals.json (``gti study geometry-intervals``, made where the weights
    are) with what no longer matches the committed runs: per-seed RSA values that
    differ from a run's geometry.json, complete runs it does not cover."""
    from gti.study.geometry_intervals import FORMAT as GI_FORMAT
    from gti.study.geometry_intervals import check_against_runs

    path = root / "geometry_intervals.json"
    if not path.is_file():
        return None
    doc = read_json(path)
    if doc.get("format") != GI_FORMAT:
        raise InputError(path, f"not a {GI_FORMAT} document (format {doc.get('format')!r})")
    problems = check_against_runs(doc, study_runs(root))
    covered = {(c["arm"], c["seed"]) for c in doc.get("checkpoints", [])}
    problems += [
        f"{d['arm']} seed {d['seed']}: a complete run the file does not cover"
        for docs in runs.values()
        for d in docs
        if (d["arm"], d["seed"]) not in covered
    ]
    return {"document": doc, "problems": problems}


def _paired_curve(curves, arms, n_resamples, seed) -> dict[str, list[dict]]:
    """A - B at every milestone of the learning curve (``CURVE_METRICS``), for each of
    PAIRS, over the seeds both arms have: does one init learn faster from the same
    SFT examples."""
    out: dict[str, list[dict]] = {}
    for arm_a, arm_b in PAIRS:
        if arm_a not in curves or arm_b not in curves:
            continue
        if arms[arm_a]["curve_split"] != arms[arm_b]["curve_split"]:
            continue
        examples = {p["step"]: p["examples"] for p in arms[arm_a]["curve"]}
        rows = []
        for step in sorted(set(curves[arm_a]) & set(curves[arm_b])):
            a_by_seed, b_by_seed = curves[arm_a][step], curves[arm_b][step]
            seeds = sorted(set(a_by_seed) & set(b_by_seed))
            if not seeds:
                continue
            a = _stack([a_by_seed[s] for s in seeds], ks=(10, 20))
            b = _stack([b_by_seed[s] for s in seeds], ks=(10, 20))
            check_aligned(a_by_seed[seeds[0]], b_by_seed[seeds[0]], "paired arms")
            rows.append(
                {
                    "step": step,
                    "examples": examples[step],
                    "seeds": seeds,
                    "metrics": {
                        k: paired_test(a[k], b[k], n_resamples=n_resamples, seed=seed).to_dict()
                        for k in CURVE_METRICS
                    },
                }
            )
        if rows:
            out[f"{arm_a} - {arm_b}"] = rows
    return out


def _verdict(diff: dict[str, float]) -> str:
    """Where an arm stands against a baseline, from the 95% interval of arm - baseline."""
    if diff["low"] > 0:
        return "above"
    if diff["high"] < 0:
        return "below"
    return "not distinguishable"


def _versus_baselines(curves, finals, arms, baseline_lists, n_resamples, seed) -> list[dict]:
    """Arm - baseline on the same users (the baseline's list paired with every seed of
    the arm), at every milestone of the curve and on the final splits: whether, and
    where, an arm crosses a baseline."""
    rows: list[dict] = []
    for arm, a in arms.items():
        points = [
            (a["curve_split"], p["step"], p["examples"], curves[arm][p["step"]]) for p in a["curve"]
        ]
        last = a["curve"][-1] if a["curve"] else None
        for split, by_seed in finals.get(arm, {}).items():
            if last is not None:
                points.append((split, last["step"], last["examples"], by_seed))
        for split, step, examples, by_seed in points:
            seeds = sorted(by_seed)
            x = _stack([by_seed[s] for s in seeds], ks=(10, 20))
            for (name, b_split), r in sorted(baseline_lists.items()):
                if b_split != split:
                    continue
                check_aligned(by_seed[seeds[0]], r, f"{arm} against baseline {name}")
                y = per_user_metrics(r, (10, 20))
                tests = {
                    k: paired_test(
                        x[k], np.broadcast_to(y[k], x[k].shape), n_resamples=n_resamples, seed=seed
                    ).to_dict()
                    for k in CURVE_METRICS
                }
                rows.append(
                    {
                        "arm": arm,
                        "baseline": name,
                        "split": split,
                        "step": step,
                        "examples": examples,
                        "seeds": seeds,
                        "metrics": tests,
                        "verdict": {k: _verdict(t["difference"]) for k, t in tests.items()},
                    }
                )
    return rows


def _examples_per_s(doc: dict) -> float | None:
    """SFT examples per second of training steps, from the committed train log (each
    step once; see ``gti.study.run.sft_step_seconds``), else run.json's figure."""
    from gti.study.run import sft_step_seconds

    steps = doc["milestones"][-1]
    step_s = sft_step_seconds(doc["_dir"] / "train_log.jsonl", steps)
    if step_s:
        return round(steps * doc["examples_per_step"] / step_s, 4)
    return doc.get("sft_examples_per_s")


def _paired(finals, runs, n_resamples, seed) -> dict[str, object]:
    """A - B on the final splits for each of PAIRS, over the seeds both arms have."""
    out: dict[str, object] = {}
    for arm_a, arm_b in PAIRS:
        if arm_a not in finals or arm_b not in finals:
            continue
        for split, a_by_seed in finals[arm_a].items():
            b_by_seed = finals[arm_b].get(split, {})
            seeds = sorted(set(a_by_seed) & set(b_by_seed))
            if not seeds:
                continue
            check_aligned(a_by_seed[seeds[0]], b_by_seed[seeds[0]], "paired arms")
            a = _stack([a_by_seed[s] for s in seeds])
            b = _stack([b_by_seed[s] for s in seeds])
            out[f"{arm_a} - {arm_b} ({split})"] = {
                "seeds": seeds,
                "metrics": {
                    k: paired_test(a[k], b[k], n_resamples=n_resamples, seed=seed).to_dict()
                    for k in a
                },
            }
    return out


def _geometry(docs: list[dict]) -> list[dict]:
    """Per milestone: each figure's mean, min and max over seeds (RSA per level)."""
    geos = [json.loads((d["_dir"] / "geometry.json").read_text()) for d in docs]
    rows = []
    for step in docs[0]["milestones"]:
        per = [g[str(step)] for g in geos if str(step) in g]
        row: dict[str, object] = {"step": step, "examples": per[0]["examples"] if per else None}
        for key in (
            "effective_rank",
            "centered_effective_rank",
            "spread_relative",
            "mean_cosine",
            "within_level_cosine",
            "between_level_cosine",
        ):
            row[key] = _spread([p.get(key) for p in per])
        levels = per[0]["levels"] if per else {}
        row["rsa"] = {lv: _spread([p["levels"][lv]["rsa"] for p in per]) for lv in levels}
        row["rsa_p"] = {lv: [p["levels"][lv]["rsa_p"] for p in per] for lv in levels}
        rows.append(row)
    return rows


def _spread(values: list) -> dict[str, float | int] | None:
    v = [float(x) for x in values if x is not None]
    if not v:
        return None
    return {"mean": float(np.mean(v)), "min": min(v), "max": max(v), "n": len(v)}


def _significant(ps: list) -> str:
    """' (k/n)': seeds whose RSA permutation p is below 0.05, of those where RSA is defined."""
    defined = [p for p in ps if p is not None]
    if not defined:
        return ""
    return f" ({sum(p < 0.05 for p in defined)}/{len(defined)})"


def _fmt(ci: dict) -> str:
    return f"{ci['estimate']:.4f} [{ci['low']:.4f}, {ci['high']:.4f}]"


def _difference_header(first: str, second: str, align: str, second_align: str) -> list[str]:
    """The header and alignment rows of a table with one "difference | second" pair per
    curve metric after the ``first`` columns."""
    pairs = " | ".join(f"{m} difference [95%] | {second}" for m in CURVE_METRICS)
    return [f"| {first} | {pairs} |", align + ("---:|" + second_align) * len(CURVE_METRICS)]


def _difference_cells(row: dict, second) -> list[str]:
    """Per curve metric, "difference [95%] | second(row, metric)" for a markdown row."""
    return [f"{_fmt(row['metrics'][m]['difference'])} | {second(row, m)}" for m in CURVE_METRICS]


def _per_seed_markdown(res: dict) -> list[str]:
    """One row per (arm, seed): recall@10 / recall@20 at every curve milestone and on
    each final split (point estimates over users), so the seed-to-seed spread shows."""
    if not res["arms"]:
        return []
    lines = ["## per seed (recall@10 / recall@20, point estimates over users)", ""]
    for arm, a in res["arms"].items():
        steps = [pt["step"] for pt in a["curve"]]
        splits = list(a["final"])
        lines += [
            f"{arm}:",
            "",
            "| seed | "
            + " | ".join(f"{a['curve_split']} step {s}" for s in steps)
            + "".join(f" | {fs} final" for fs in splits)
            + " |",
            "|---:|" + "---:|" * (len(steps) + len(splits)),
        ]
        for seed, ps in a["per_seed"].items():
            cells = [pt for pt in ps["curve"]] + [ps["final"][fs] for fs in splits]
            lines.append(
                f"| {seed} | "
                + " | ".join(f"{c['recall@10']:.4f} / {c['recall@20']:.4f}" for c in cells)
                + " |"
            )
        lines.append("")
    return lines


def to_markdown(res: dict) -> str:
    lines = ["# ML-100k study: results", ""]
    if not res["arms"]:
        lines += ["No complete (arm, seed) run yet: baselines only.", ""]
    lines += [
        f"Intervals: 95% percentile bootstrap, {res['n_resamples']} resamples (seed "
        f"{res['bootstrap_seed']}), over seeds and users (two-way) for the arms, over "
        "users for the baselines. Every number is recomputed from the committed "
        "per-user rankings by `gti study assemble`.",
        "",
    ]
    names = [f"{m}@{k}" for m in ("recall", "ndcg") for k in res["ks"]]
    for split in ("test", "valid"):
        rows = []
        for arm, a in res["arms"].items():
            if split in a["final"]:
                rows.append((f"{arm} ({len(a['seeds'])} seed(s))", a["final"][split]))
            elif a["curve_split"] == split and a["curve"]:
                rows.append((f"{arm} ({len(a['seeds'])} seed(s))", a["curve"][-1]))
        for b, entry in res["baselines"].items():
            if split in entry:
                rows.append((f"baseline: {b}", entry[split]))
        if not rows:
            continue
        lines += [
            f"## {split}, final budget",
            "",
            "| model | users | " + " | ".join(names) + " |",
            "|---|---:|" + "---:|" * len(names),
        ]
        for label, entry in rows:
            cells = [_fmt(entry["metrics"][n]) for n in names]
            lines.append(f"| {label} | {entry['n_users']} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += [
        "## learning curves (" + ", ".join(CURVE_METRICS) + ")",
        "",
        "| arm | step | examples | users | " + " | ".join(CURVE_METRICS) + " |",
        "|---|---:|---:|---:|" + "---:|" * len(CURVE_METRICS),
    ]
    for arm, a in res["arms"].items():
        for pt in a["curve"]:
            cells = [_fmt(pt["metrics"][m]) for m in CURVE_METRICS]
            lines.append(
                f"| {arm} | {pt['step']} | {pt['examples']} | {pt['n_users']} | "
                + " | ".join(cells)
                + " |"
            )
    lines.append("")
    lines += _per_seed_markdown(res)
    if res["paired"]:
        lines += [
            "## paired differences (final budget)",
            "",
            "| comparison | seeds | metric | difference [95%] | p (sign-flip) | users +/- |",
            "|---|---:|---|---:|---:|---:|",
        ]
        for name, entry in res["paired"].items():
            for metric in ("recall@10", "recall@20", "ndcg@10"):
                t = entry["metrics"][metric]
                lines.append(
                    f"| {name} | {len(entry['seeds'])} | {metric} | "
                    f"{_fmt(t['difference'])} | {t['p_value']:.4g} | "
                    f"{t['wins']}/{t['losses']} |"
                )
        lines.append("")
    if res.get("paired_curve"):
        lines += [
            "## learning curves, paired (A - B, same users and seeds)",
            "",
            *_difference_header(
                "comparison | step | examples | seeds", "p", "|---|---:|---:|---:|", "---:|"
            ),
        ]
        for name, rows in res["paired_curve"].items():
            for row in rows:
                cells = _difference_cells(row, lambda r, m: f"{r['metrics'][m]['p_value']:.4g}")
                lines.append(
                    f"| {name} | {row['step']} | {row['examples']} | "
                    f"{len(row['seeds'])} | " + " | ".join(cells) + " |"
                )
        lines.append("")
    if res.get("versus_baselines"):
        lines += [
            "## arms against the baselines (arm - baseline, same users)",
            "",
            "Verdict from the 95% interval of the difference: above / below / not distinguishable.",
            "",
            *_difference_header(
                "arm | split | examples | baseline", "verdict", "|---|---|---:|---|", "---|"
            ),
        ]
        for row in res["versus_baselines"]:
            cells = _difference_cells(row, lambda r, m: r["verdict"][m])
            lines.append(
                f"| {row['arm']} ({len(row['seeds'])} seed(s)) | {row['split']} | "
                f"{row['examples']} | {row['baseline']} | " + " | ".join(cells) + " |"
            )
        lines.append("")
    lines += [
        "## geometry through SFT (mean over seeds)",
        "",
        "RSA per level: mean over seeds (seeds with permutation p < 0.05 / seeds with "
        "RSA defined).",
        "",
        "| arm | step | eff. rank | centered eff. rank | spread rel. | mean cos | RSA per level |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for arm, a in res["arms"].items():
        for g in a["geometry"]:

            def f(x):
                return "-" if x is None else f"{x['mean']:.3f}"

            rsa = ", ".join(
                f"{lv} {f(v)}{_significant(g['rsa_p'][lv])}" for lv, v in g["rsa"].items()
            )
            lines.append(
                f"| {arm} | {g['step']} | {f(g['effective_rank'])} | "
                f"{f(g['centered_effective_rank'])} | "
                f"{f(g['spread_relative'])} | {f(g['mean_cosine'])} | {rsa} |"
            )
    lines.append("")
    if res.get("geometry_intervals"):
        from gti.study.geometry_intervals import to_markdown as intervals_markdown

        gi = res["geometry_intervals"]
        lines += intervals_markdown(gi["document"], gi["problems"])
    lines += ["## wall time per stage (seconds) and throughput", ""]
    for arm, a in res["arms"].items():
        for seed, secs in a["stage_seconds"].items():
            parts = ", ".join(f"{k} {v:.0f}" for k, v in secs.items())
            lines.append(f"- {arm} seed {seed}: {parts}")
        tpe = a["tokens_per_example"] or {}
        lines.append(
            f"- {arm}: SFT examples/s per seed (training steps only) {a['sft_examples_per_s']}, tokens/example "
            f"{tpe.get('tokens', 0):.1f} (answer {tpe.get('answer_tokens', 0):.1f})"
        )
    lines += ["", "## commands and machines", ""]
    for arm, a in res["arms"].items():
        for c in a["commands"]:
            lines.append(f"- {arm}: `{c}`")
        for m in sorted({json.dumps(x, sort_keys=True) for x in a["machines"]}):
            lines.append(f"- {arm} machine: {m}")
    for b in res["baselines"]:
        how = "scripts/sasrec-venv.sh" if b == "sasrec" else f"gti baselines --baseline {b}"
        lines.append(f"- baseline {b}: `{how}` (fit on the training sequences)")
    lines.append("- tables and plots: `gti study assemble <this folder>`")
    return "\n".join(lines) + "\n"


def plot(res: dict, folder: Path) -> list[Path]:
    """learning_curves.png, learning_curves_paired.png (when two arms of PAIRS ran),
    geometry.png, spectra.png (from ``res`` and the runs' files)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[Path] = []
    fig, axes = plt.subplots(1, len(CURVE_METRICS), figsize=(6 * len(CURVE_METRICS), 4.2))
    for ax, metric in zip(np.atleast_1d(axes), CURVE_METRICS, strict=True):
        for arm, a in res["arms"].items():
            x = [p["examples"] for p in a["curve"]]
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
        ax.set_xlabel("SFT examples")
        ax.set_ylabel(f"{split} {metric}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    written.append(_save(fig, folder / "learning_curves.png"))

    if res.get("paired_curve"):
        fig, axes = plt.subplots(1, len(CURVE_METRICS), figsize=(6 * len(CURVE_METRICS), 4.2))
        for ax, metric in zip(np.atleast_1d(axes), CURVE_METRICS, strict=True):
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
            ax.set_xlabel("SFT examples")
            ax.set_ylabel(f"paired difference in {metric} (95% interval)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        written.append(_save(fig, folder / "learning_curves_paired.png"))

    if not res["arms"]:
        return written
    keys = ("effective_rank", "centered_effective_rank", "spread_relative", "mean_cosine", "rsa")
    fig, axes = plt.subplots(1, len(keys), figsize=(4.5 * len(keys), 3.8))
    for ax, key in zip(axes, keys, strict=True):
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
        ax.set_xlabel("SFT examples")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    written.append(_save(fig, folder / "geometry.png"))

    fig, ax = plt.subplots(figsize=(6, 4.2))
    for i, (arm, docs) in enumerate(_runs(folder).items()):
        geo = json.loads((docs[0]["_dir"] / "geometry.json").read_text())
        last = geo[str(docs[0]["milestones"][-1])]
        s = np.asarray(last["singular_values"])
        ax.semilogy(np.arange(1, len(s) + 1), s / s[0], color=f"C{i}", label=arm)
        if i == 0:
            r = np.asarray(last["reference_singular_values"])
            ax.semilogy(np.arange(1, len(r) + 1), r / r[0], "k:", label="original vocabulary")
    ax.set_xlabel("index")
    ax.set_ylabel("singular value / largest (final checkpoint, first seed)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    written.append(_save(fig, folder / "spectra.png"))
    return written


def _save(fig, path: Path) -> Path:
    """Lay out, write and close one figure; returns its path."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def assemble(root: Path, *, n_resamples: int = 10_000, seed: int = 0) -> dict[str, Path]:
    """Write results.json, results.md and the plots into ``root``; returns their paths."""
    from geodiag.atomic import atomic_write

    root = Path(root)
    res = collect(root, n_resamples=n_resamples, seed=seed)
    js, md = root / "results.json", root / "results.md"
    atomic_write(js, json.dumps(res, indent=1, allow_nan=False) + "\n")
    atomic_write(md, to_markdown(res))
    pngs = plot(res, root)
    return {"results.json": js, "results.md": md, **{p.name: p for p in pngs}}
