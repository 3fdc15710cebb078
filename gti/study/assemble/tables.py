"""results.md: one function per table of a results document (``collect``'s dict), each
returning its markdown lines; :func:`to_markdown` puts them in order."""

from __future__ import annotations

import json
from collections.abc import Callable

from geodiag.metrics.rsa import SIGNIFICANCE as RSA_ALPHA
from gti.study.assemble.collect import CURVE_METRICS

# The metrics of the paired-differences table (final budget).
PAIRED_METRICS = ("recall@10", "recall@20", "ndcg@10")
# Seeds whose RSA permutation p is below RSA_ALPHA (geodiag's significance level) are
# counted as significant.


def _fmt(ci: dict) -> str:
    return f"{ci['estimate']:.4f} [{ci['low']:.4f}, {ci['high']:.4f}]"


def _fmt_relative(ci: dict | None) -> str:
    """A / B - 1 in percent; '-' where B's mean is 0 (or the file predates the field)."""
    if ci is None:
        return "-"
    return f"{100 * ci['estimate']:+.0f}% [{100 * ci['low']:+.0f}%, {100 * ci['high']:+.0f}%]"


def _significant(ps: list) -> str:
    """' (k/n)': seeds whose RSA permutation p is below RSA_ALPHA, of those where RSA is
    defined."""
    defined = [p for p in ps if p is not None]
    if not defined:
        return ""
    return f" ({sum(p < RSA_ALPHA for p in defined)}/{len(defined)})"


def _difference_header(first: str, second: str, align: str, second_align: str) -> list[str]:
    """The header and alignment rows of a table with one "difference | second" pair per
    curve metric after the ``first`` columns."""
    pairs = " | ".join(f"{m} difference [95%] | {second}" for m in CURVE_METRICS)
    return [f"| {first} | {pairs} |", align + ("---:|" + second_align) * len(CURVE_METRICS)]


def _difference_cells(row: dict, second: Callable[[dict, str], str]) -> list[str]:
    """Per curve metric, "difference [95%] | second(row, metric)" for a markdown row."""
    return [f"{_fmt(row['metrics'][m]['difference'])} | {second(row, m)}" for m in CURVE_METRICS]


def intro(res: dict) -> list[str]:
    lines = ["# ML-100k study: results", ""]
    if not res["arms"]:
        lines += ["No measured (arm, seed) run yet: baselines only.", ""]
    return lines + [
        f"Intervals: 95% percentile bootstrap, {res['n_resamples']} resamples (seed "
        f"{res['bootstrap_seed']}), over seeds and users (two-way) for the arms, over "
        "users for the baselines. Every number is recomputed from the committed "
        "per-user rankings by `gti study assemble`.",
        "",
    ]


def final_table(res: dict, split: str) -> list[str]:
    """Every arm (its final split, else its curve's last point on ``split``) and every
    baseline on ``split``: Recall and NDCG at each K; nothing when none has ``split``."""
    rows = []
    for arm, a in res["arms"].items():
        if split in a["final"]:
            rows.append((f"{arm} ({len(a['final'][split]['seeds'])} seed(s))", a["final"][split]))
        elif a["curve_split"] == split and a["curve"]:
            pt = a["curve"][-1]
            at = f"step {pt['step']}" + (
                "" if pt.get("epochs") is None else f", {pt['epochs']:g} epochs"
            )
            rows.append((f"{arm} ({len(pt['seeds'])} seed(s), {at})", pt))
    for b, entry in res["baselines"].items():
        if split in entry:
            rows.append((f"baseline: {b}", entry[split]))
    return model_table(f"## {split}, final budget", rows, res["ks"]) if rows else []


def model_table(title: str, rows: list[tuple[str, dict]], ks: list[int]) -> list[str]:
    """``title`` and one row per (label, pooled entry): its users, Recall and NDCG at each
    of ``ks`` with intervals."""
    names = [f"{m}@{k}" for m in ("recall", "ndcg") for k in ks]
    lines = [
        title,
        "",
        "| model | users | " + " | ".join(names) + " |",
        "|---|---:|" + "---:|" * len(names),
    ]
    for label, entry in rows:
        cells = [_fmt(entry["metrics"][n]) for n in names]
        lines.append(f"| {label} | {entry['n_users']} | " + " | ".join(cells) + " |")
    return lines + [""]


def earlier_final_tables(res: dict) -> list[str]:
    """The final splits at each earlier plan's last milestone (the study's epochs grew
    since): every run that measured them there, and the paired differences."""
    lines: list[str] = []
    for e in res.get("earlier_finals", []):
        at = f"step {e['step']}" + ("" if e.get("epochs") is None else f", {e['epochs']:g} epochs")
        for split in sorted({fs for f in e["arms"].values() for fs in f}):
            rows = [
                (f"{arm} ({len(f[split]['seeds'])} seed(s))", f[split])
                for arm, f in e["arms"].items()
                if split in f
            ]
            title = f"## {split} at {at} (an earlier plan's final budget)"
            lines += model_table(title, rows, res["ks"])
        lines += paired_table({"paired": e["paired"]}, f"## paired differences ({at})")
    return lines


def curve_table(res: dict) -> list[str]:
    lines = [
        "## learning curves (" + ", ".join(CURVE_METRICS) + ")",
        "",
        "| arm | step | examples | epochs | users | " + " | ".join(CURVE_METRICS) + " |",
        "|---|---:|---:|---:|---:|" + "---:|" * len(CURVE_METRICS),
    ]
    for arm, a in res["arms"].items():
        for pt in a["curve"]:
            cells = [_fmt(pt["metrics"][m]) for m in CURVE_METRICS]
            epochs = "-" if pt.get("epochs") is None else f"{pt['epochs']:g}"
            lines.append(
                f"| {arm} | {pt['step']} | {pt['examples']} | {epochs} | {pt['n_users']} | "
                + " | ".join(cells)
                + " |"
            )
    return lines + [""]


def per_seed_tables(res: dict) -> list[str]:
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
            by_step = {c["step"]: c for c in ps["curve"]}  # a run in progress lacks the later
            cells = [*(by_step.get(s) for s in steps), *(ps["final"].get(fs) for fs in splits)]
            lines.append(
                f"| {seed} | "
                + " | ".join(
                    "-" if c is None else f"{c['recall@10']:.4f} / {c['recall@20']:.4f}"
                    for c in cells
                )
                + " |"
            )
        lines.append("")
    return lines


def paired_table(res: dict, title: str = "## paired differences (final budget)") -> list[str]:
    if not res["paired"]:
        return []
    lines = [
        title,
        "",
        "| comparison | seeds | metric | difference [95%] | A / B - 1 [95%] | p (sign-flip) "
        "| users +/- |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for name, entry in res["paired"].items():
        for metric in PAIRED_METRICS:
            t = entry["metrics"][metric]
            lines.append(
                f"| {name} | {len(entry['seeds'])} | {metric} | "
                f"{_fmt(t['difference'])} | {_fmt_relative(t.get('relative'))} | "
                f"{t['p_value']:.4g} | {t['wins']}/{t['losses']} |"
            )
    return lines + [""]


def paired_curve_table(res: dict) -> list[str]:
    if not res.get("paired_curve"):
        return []
    lines = [
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
    return lines + [""]


def versus_baselines_table(res: dict) -> list[str]:
    if not res.get("versus_baselines"):
        return []
    lines = [
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
    return lines + [""]


def _mean(x: dict | None) -> str:
    return "-" if x is None else f"{x['mean']:.3f}"


def geometry_table(res: dict) -> list[str]:
    lines = [
        "## geometry through SFT (mean over seeds)",
        "",
        f"RSA per level: mean over seeds (seeds with permutation p < {RSA_ALPHA} / seeds "
        "with RSA defined).",
        "",
        "| arm | step | eff. rank | centered eff. rank | spread rel. | mean cos | RSA per level |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for arm, a in res["arms"].items():
        for g in a["geometry"]:
            rsa = ", ".join(
                f"{lv} {_mean(v)}{_significant(g['rsa_p'][lv])}" for lv, v in g["rsa"].items()
            )
            lines.append(
                f"| {arm} | {g['step']} | {_mean(g['effective_rank'])} | "
                f"{_mean(g['centered_effective_rank'])} | "
                f"{_mean(g['spread_relative'])} | {_mean(g['mean_cosine'])} | {rsa} |"
            )
    return lines + [""]


def geometry_intervals_table(res: dict) -> list[str]:
    if not res.get("geometry_intervals"):
        return []
    from gti.study.geometry_intervals import to_markdown as intervals_markdown

    gi = res["geometry_intervals"]
    return intervals_markdown(gi["document"], gi["problems"], gi.get("notes", []))


def wall_time_lines(res: dict) -> list[str]:
    lines = ["## wall time per stage (seconds) and throughput", ""]
    for arm, a in res["arms"].items():
        for seed, secs in a["stage_seconds"].items():
            parts = ", ".join(f"{k} {v:.0f}" for k, v in secs.items())
            lines.append(f"- {arm} seed {seed}: {parts}")
        tpe = a["tokens_per_example"] or {}
        lines.append(
            f"- {arm}: SFT examples/s per seed (training steps only) {a['sft_examples_per_s']}, tokens/example "
            f"{tpe.get('tokens', 0):.1f} (answer {tpe.get('answer_tokens', 0):.1f})"
        )
    return lines


def provenance_lines(res: dict) -> list[str]:
    """The commands and machines that made each arm, how each baseline was made."""
    lines = ["", "## commands and machines", ""]
    for arm, a in res["arms"].items():
        for c in a["commands"]:
            lines.append(f"- {arm}: `{c}`")
        for m in sorted({json.dumps(x, sort_keys=True) for x in a["machines"]}):
            lines.append(f"- {arm} machine: {m}")
    for b in res["baselines"]:
        how = "scripts/sasrec-venv.sh" if b == "sasrec" else f"gti baselines --baseline {b}"
        lines.append(f"- baseline {b}: `{how}` (fit on the training sequences)")
    lines.append("- tables and plots: `gti study assemble <this folder>`")
    return lines


def status_lines(res: dict) -> list[str]:
    """The runs complete under an earlier plan, and the runs still training with how far
    each has been measured."""
    open_runs = [
        (arm, r) for arm, a in res["arms"].items() for r in a.get("runs", [])
        if r["status"] != "complete"
    ]  # fmt: skip
    earlier = [
        f"- {arm} seed {r['seed']}: complete at step {r['measured'][-1]}, an earlier plan's "
        "last milestone (its final splits are pooled at that step, with every run that "
        "measured them there, not with the others'; re-run it to continue under the "
        "study's plan)"
        for arm, r in open_runs
        if r["status"] == "earlier plan"
    ]
    training = [
        f"- {arm} seed {r['seed']}: measured steps {r['measured']} of {r['planned']}"
        for arm, r in open_runs
        if r["status"] != "earlier plan"
    ]
    lines: list[str] = []
    if earlier:
        lines += ["Runs complete under an earlier plan (the study's plan has grown since):", ""]
        lines += earlier + [""]
    if training:
        lines += [
            "Runs still training (their measured milestones are in the curves; no final split):",
            "",
        ]
        lines += training + [""]
    return lines


def short_digest(digest: str) -> str:
    """A digest as ``digest_text`` writes it (``algorithm:hex``), cut to 12 hex digits."""
    return digest.rpartition(":")[2][:12]


def init_build_lines(res: dict) -> list[str]:
    """Runs whose milestones descend from more than one build of their init (rebuilt after
    the work folder lost it): the same config and seed, float reductions in another order."""
    split = [
        (arm, r) for arm, a in res["arms"].items() for r in a.get("runs", [])
        if len(r.get("init_builds", [])) > 1
    ]  # fmt: skip
    if not split:
        return []
    lines = [
        "Runs whose milestones descend from different builds of their init (the init was "
        "rebuilt; same config and seed, its float reductions in another order):",
        "",
    ]
    for arm, r in split:
        parts = "; ".join(
            f"steps {b['steps']} from {short_digest(b['digest'])}" for b in r["init_builds"]
        )
        lines.append(f"- {arm} seed {r['seed']}: {parts}")
    return lines + [""]


def to_markdown(res: dict) -> str:
    lines = intro(res) + status_lines(res) + init_build_lines(res)
    for split in ("test", "valid"):  # the headline split first
        lines += final_table(res, split)
    lines += earlier_final_tables(res)
    for table in (
        curve_table,
        per_seed_tables,
        paired_table,
        paired_curve_table,
        versus_baselines_table,
        geometry_table,
        geometry_intervals_table,
        wall_time_lines,
        provenance_lines,
    ):
        lines += table(res)
    return "\n".join(lines) + "\n"
