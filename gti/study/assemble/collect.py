"""The numbers of ``results.json``, from a study's committed files (:mod:`.inputs`):
a strict-JSON dict, rendered by :mod:`.tables` and :mod:`.plots`.

Every number is recomputed from the per-user rankings (``gti.evaluate.rankings``)
with the statistics of ``gti.evaluate.stats``: per arm and milestone, the mean over
seeds and users with a two-way bootstrap interval; baselines with a bootstrap over
users; paired differences (``PAIRS``) with interval and sign-flip test, on the final
splits and at every milestone of the learning curve; every arm against every baseline
on the same users, with a verdict (above / below / not distinguishable) from the
interval.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.jsonio import read_json
from gti.evaluate.rankings import RANKING_KS, Rankings, check_aligned, per_user_metrics
from gti.evaluate.stats import DEFAULT_RESAMPLES, interval, paired_test, relative_gain
from gti.experiment.layout import Files, study_runs
from gti.study.assemble.inputs import Run, StudyInputs, read_inputs

FORMAT = "gti.study.results"
# The learning curves, their paired differences and the arms against the baselines
# report Recall at these K.
CURVE_KS = (10, 20)
CURVE_METRICS = tuple(f"recall@{k}" for k in CURVE_KS)
# (A, B) pairs reported as A - B when both arms ran: GTI against each other init with
# plain SFT, and with the LC-Rec task mix on both sides (the paper's two comparisons);
# GTI from the projected codebooks against GTI from the mean (does the start matter once
# grounded?) and against the mean.
PAIRS = (
    ("gti", "mean"),
    ("gti", "random"),
    ("gti", "description-mean"),
    ("gti-from-codebook-projection", "gti"),
    ("gti-from-codebook-projection", "mean"),
    ("gti+lcrec", "lcrec"),
    ("lcrec", "mean"),
)
# The figures of geometry.json summarized per milestone (mean, min, max over seeds).
GEOMETRY_FIGURES = (
    "effective_rank",
    "centered_effective_rank",
    "spread_relative",
    "mean_cosine",
    "within_level_cosine",
    "between_level_cosine",
)

BySeed = dict[int, Rankings]  # seed -> one run's lists


def stack(lists: list[Rankings], ks: tuple[int, ...] = RANKING_KS) -> dict[str, np.ndarray]:
    """(n_seeds, n_users) per metric; every list must cover the same users and targets."""
    for r in lists[1:]:
        check_aligned(lists[0], r, "per-seed rankings")
    per = [per_user_metrics(r, ks) for r in lists]
    return {m: np.stack([p[m] for p in per]) for m in per[0]}


def _means(m: dict[str, np.ndarray], row: int) -> dict[str, float]:
    """Point estimates of one seed (row ``row`` of ``stack``'s arrays) over its users."""
    return {k: float(v[row].mean()) for k, v in m.items()}


def _intervals(m: dict[str, np.ndarray], n_resamples: int, seed: int) -> dict[str, dict]:
    return {k: interval(v, n_resamples=n_resamples, seed=seed).to_dict() for k, v in m.items()}


def collect(
    root: Path, *, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0
) -> dict[str, object]:
    """results.json's document for the study folder ``root``."""
    inputs = read_inputs(root)
    out: dict[str, object] = {
        "format": FORMAT,
        "format_version": 1,
        "n_resamples": n_resamples,
        "bootstrap_seed": seed,
        "ks": list(RANKING_KS),
    }
    out["baselines"] = {
        name: {
            split: {"n_users": len(r.users), "metrics": _intervals(stack([r]), n_resamples, seed)}
            for split, r in lists.items()
        }
        for name, lists in inputs.baselines.items()
    }
    # A step's point covers the seeds that measured it (a run still training has its
    # measured milestones only); the final splits cover the complete runs.
    curves = {
        arm: {
            step: {r.seed: r.curve(step) for r in runs if step in r.milestones}
            for step in measured_steps(runs)
        }
        for arm, runs in inputs.runs.items()
    }
    # The final splits at the study's last milestone pool the runs measured there; a run
    # complete under an earlier, shorter plan (before epochs were added) is pooled at its
    # own last milestone instead, with the runs that measured that one (earlier_finals).
    last = final_step(inputs)
    by_step = finals_by_step(inputs)
    finals = {arm: by_step.get(last, {}).get(arm, {}) for arm in inputs.runs}
    arms = {
        arm: arm_entry(runs, curves[arm], finals[arm], n_resamples, seed, last)
        for arm, runs in inputs.runs.items()
    }
    out["arms"] = arms
    out["paired"] = paired(finals, n_resamples, seed)
    out["paired_curve"] = paired_curve(curves, arms, n_resamples, seed)
    baseline_lists = {
        (name, split): r for name, lists in inputs.baselines.items() for split, r in lists.items()
    }
    out["versus_baselines"] = versus_baselines(
        curves, finals, arms, baseline_lists, n_resamples, seed
    )
    out["geometry_intervals"] = geometry_intervals(inputs)
    out["earlier_finals"] = [
        {
            "step": step,
            "epochs": next(r.epochs(step) for runs in inputs.runs.values() for r in runs),
            "arms": {
                arm: {
                    fs: pooled(by_seed, stack(list(by_seed.values())), n_resamples, seed)
                    for fs, by_seed in f.items()
                }
                for arm, f in arm_finals.items()
            },
            "paired": paired(arm_finals, n_resamples, seed),
        }
        for step, arm_finals in by_step.items()
        if step != last
    ]
    return out


def finals_by_step(inputs: StudyInputs) -> dict[int, dict[str, dict[str, BySeed]]]:
    """{step: {arm: {split: {seed: lists}}}}, steps ascending: each final split at every
    step a run measured it, as its final (complete there) or as the lists it kept when
    the study's epochs grew past that step (:meth:`Run.final_at`)."""
    splits = sorted({fs for runs in inputs.runs.values() for r in runs for fs in r.final_splits})
    out: dict[int, dict[str, dict[str, BySeed]]] = {}
    for arm, runs in inputs.runs.items():
        for r in runs:
            for step in r.milestones:
                for fs in splits:
                    lists = r.final_at(step, fs)
                    if lists is not None:
                        out.setdefault(step, {}).setdefault(arm, {}).setdefault(fs, {})[r.seed] = (
                            lists
                        )
    return dict(sorted(out.items()))


def pooled(
    by_seed: BySeed, m: dict[str, np.ndarray], n_resamples: int, seed: int
) -> dict[str, object]:
    """One arm's lists on one split at one step, pooled over its seeds: the seeds, the
    users and each metric with its interval; ``m`` is :func:`stack` of ``by_seed``."""
    return {
        "seeds": sorted(by_seed),
        "n_users": m["recall@10"].shape[1],
        "metrics": _intervals(m, n_resamples, seed),
    }


def final_step(inputs: StudyInputs) -> int | None:
    """The last milestone of the study's longest complete plan (None: no complete run)."""
    return max(
        (r.milestones[-1] for runs in inputs.runs.values() for r in runs if r.complete),
        default=None,
    )


def at_final(run: Run, last: int | None) -> bool:
    """Whether ``run`` is complete at the study's final step ``last`` (:func:`final_step`)."""
    return run.complete and run.milestones[-1] == last


def run_status(run: Run, last: int | None) -> str:
    """complete; "earlier plan" (complete, but its last milestone is before ``last``: the
    study's epochs grew after it ran); or "in progress"."""
    if not run.complete:
        return "in progress"
    return "complete" if at_final(run, last) else "earlier plan"


def measured_steps(runs: list[Run]) -> list[int]:
    """Every milestone any of ``runs`` measured, ascending."""
    return sorted({step for r in runs for step in r.milestones})


def arm_entry(
    runs: list[Run],
    curves: dict[int, BySeed],
    finals: dict[str, BySeed],
    n_resamples: int,
    seed: int,
    last: int | None = None,
) -> dict[str, object]:
    """One arm of results.json: the curve and the final splits with intervals over seeds
    and users, each seed's point estimates, geometry per milestone, times, commands."""
    first = runs[0]
    seeds = [r.seed for r in runs]
    per_seed: dict[str, dict] = {str(s): {"curve": [], "final": {}} for s in seeds}
    curve = []
    for step, by_seed in curves.items():
        m = stack(list(by_seed.values()))
        curve.append(
            {
                "step": step,
                "examples": step * first.examples_per_step,
                "epochs": first.epochs(step),
                **pooled(by_seed, m, n_resamples, seed),
            }
        )
        for i, s in enumerate(by_seed):
            per_seed[str(s)]["curve"].append({"step": step, **_means(m, i)})
    final = {}
    for fs, by_seed in finals.items():
        m = stack(list(by_seed.values()))
        final[fs] = pooled(by_seed, m, n_resamples, seed)
        for i, s in enumerate(by_seed):
            per_seed[str(s)]["final"][fs] = _means(m, i)
    return {
        "seeds": seeds,
        # each run: complete, or still training with the milestones it has measured
        "runs": [
            {
                "seed": r.seed,
                "status": run_status(r, last),
                "measured": r.milestones,
                "planned": r.planned,
                "init_builds": init_builds(r),
            }
            for r in runs
        ],
        "curve_split": first.curve_split,
        "curve": curve,
        "final": final,
        "per_seed": per_seed,
        "geometry": geometry(runs),
        "stage_seconds": {str(r.seed): r.stage_seconds for r in runs},
        "sft_examples_per_s": [r.examples_per_s() for r in runs],
        "tokens_per_example": first.tokens_per_example,
        "commands": sorted({r.command for r in runs}),
        "machines": [r.machine for r in runs],
    }


def geometry_intervals(inputs: StudyInputs) -> dict | None:
    """geometry_intervals.json (``gti study geometry-intervals``, made where the weights
    are) with what no longer matches the committed runs: per-seed RSA values that
    differ from a run's geometry.json, complete runs it does not cover."""
    from gti.study.geometry_intervals import FORMAT as GI_FORMAT
    from gti.study.geometry_intervals import check_against_runs, rebuilt_inits

    path = inputs.root / Files.GEOMETRY_INTERVALS
    if not path.is_file():
        return None
    doc = read_json(path)
    if doc.get("format") != GI_FORMAT:
        raise InputError(path, f"not a {GI_FORMAT} document (format {doc.get('format')!r})")
    problems = check_against_runs(doc, study_runs(inputs.root))
    covered = {(c["arm"], c["seed"]) for c in doc.get("checkpoints", [])}
    problems += [
        f"{r.arm} seed {r.seed}: a complete run the file does not cover"
        for runs in inputs.runs.values()
        for r in runs
        if r.complete and (r.arm, r.seed) not in covered  # one still training has no final
    ]
    notes = rebuilt_inits(doc, study_runs(inputs.root))
    return {"document": doc, "problems": problems, "notes": notes}


def _paired_tests(a: dict, b: dict, keys, n_resamples: int, seed: int) -> dict[str, dict]:
    return {k: paired_test(a[k], b[k], n_resamples=n_resamples, seed=seed).to_dict() for k in keys}


def paired_curve(
    curves: dict[str, dict[int, BySeed]], arms: dict[str, dict], n_resamples: int, seed: int
) -> dict[str, list[dict]]:
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
            a = stack([a_by_seed[s] for s in seeds], ks=CURVE_KS)
            b = stack([b_by_seed[s] for s in seeds], ks=CURVE_KS)
            check_aligned(a_by_seed[seeds[0]], b_by_seed[seeds[0]], "paired arms")
            rows.append(
                {
                    "step": step,
                    "examples": examples[step],
                    "seeds": seeds,
                    "metrics": _paired_tests(a, b, CURVE_METRICS, n_resamples, seed),
                }
            )
        if rows:
            out[f"{arm_a} - {arm_b}"] = rows
    return out


def verdict(diff: dict[str, float]) -> str:
    """Where an arm stands against a baseline, from the 95% interval of arm - baseline."""
    if diff["low"] > 0:
        return "above"
    if diff["high"] < 0:
        return "below"
    return "not distinguishable"


def versus_baselines(
    curves: dict[str, dict[int, BySeed]],
    finals: dict[str, dict[str, BySeed]],
    arms: dict[str, dict],
    baseline_lists: dict[tuple[str, str], Rankings],
    n_resamples: int,
    seed: int,
) -> list[dict]:
    """Arm - baseline on the same users (the baseline's list paired with every seed of
    the arm), at every milestone of the curve and on the final splits: whether, and
    where, an arm crosses a baseline."""
    rows: list[dict] = []
    for arm, a in arms.items():
        points = [
            (a["curve_split"], p["step"], p["examples"], curves[arm][p["step"]]) for p in a["curve"]
        ]
        # the final splits sit at the complete runs' last milestone (the curve's last
        # point, unless a run still training has planned more)
        done = [r["measured"][-1] for r in a.get("runs", []) if r["status"] == "complete"]
        at = max(done) if done else (a["curve"][-1]["step"] if a["curve"] else None)
        last = next((p for p in a["curve"] if p["step"] == at), None)
        for split, by_seed in finals.get(arm, {}).items():
            if last is not None:
                points.append((split, last["step"], last["examples"], by_seed))
        for split, step, examples, by_seed in points:
            seeds = sorted(by_seed)
            x = stack([by_seed[s] for s in seeds], ks=CURVE_KS)
            for (name, b_split), r in sorted(baseline_lists.items()):
                if b_split != split:
                    continue
                check_aligned(by_seed[seeds[0]], r, f"{arm} against baseline {name}")
                y = {
                    k: np.broadcast_to(v, x[k].shape)
                    for k, v in per_user_metrics(r, CURVE_KS).items()
                }
                tests = _paired_tests(x, y, CURVE_METRICS, n_resamples, seed)
                rows.append(
                    {
                        "arm": arm,
                        "baseline": name,
                        "split": split,
                        "step": step,
                        "examples": examples,
                        "seeds": seeds,
                        "metrics": tests,
                        "verdict": {k: verdict(t["difference"]) for k, t in tests.items()},
                    }
                )
    return rows


def paired(finals: dict[str, dict[str, BySeed]], n_resamples: int, seed: int) -> dict[str, object]:
    """A - B on the final splits for each of PAIRS, over the seeds both arms have, with
    the relative gain A / B - 1 on the same resamples."""
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
            a = stack([a_by_seed[s] for s in seeds])
            b = stack([b_by_seed[s] for s in seeds])
            tests = _paired_tests(a, b, a, n_resamples, seed)
            for k, test in tests.items():  # A / B - 1: how a paper states a gain
                rel = relative_gain(a[k], b[k], n_resamples=n_resamples, seed=seed)
                test["relative"] = rel.to_dict() if rel is not None else None
            out[f"{arm_a} - {arm_b} ({split})"] = {"seeds": seeds, "metrics": tests}
    return out


def init_builds(run: Run) -> list[dict]:
    """The init builds ``run``'s milestones descend from (geometry.json's ``init_digest``,
    :func:`gti.study.run.init_digest`), each with its milestones, in step order; steps
    recorded before digests were kept are left out."""
    by: dict[str, list[int]] = {}
    for step, g in sorted(run.geometry().items(), key=lambda kv: int(kv[0])):
        if g.get("init_digest"):
            by.setdefault(g["init_digest"], []).append(int(step))
    return [{"digest": d, "steps": steps} for d, steps in by.items()]


def geometry(runs: list[Run]) -> list[dict]:
    """Per milestone: each figure's mean, min and max over seeds (RSA per level)."""
    geos = [r.geometry() for r in runs]
    rows = []
    for step in measured_steps(runs):
        per = [g[str(step)] for g in geos if str(step) in g]
        row: dict[str, object] = {"step": step, "examples": per[0]["examples"] if per else None}
        for key in GEOMETRY_FIGURES:
            row[key] = spread([p.get(key) for p in per])
        levels = per[0]["levels"] if per else {}
        row["rsa"] = {lv: spread([p["levels"][lv]["rsa"] for p in per]) for lv in levels}
        row["rsa_p"] = {lv: [p["levels"][lv]["rsa_p"] for p in per] for lv in levels}
        rows.append(row)
    return rows


def spread(values: list) -> dict[str, float | int] | None:
    """Mean, min, max and count of the defined values; None when none is."""
    v = [float(x) for x in values if x is not None]
    if not v:
        return None
    return {"mean": float(np.mean(v)), "min": min(v), "max": max(v), "n": len(v)}
