"""The study runner and assemble end to end on the tiny world: the exact files one
(arm, seed) run writes, a re-run that does nothing, and assemble's numbers equal to a
recomputation from the per-user lists with gti.evaluate.metrics (an independent
implementation over index arrays)."""

from __future__ import annotations

import json
import shutil
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from geodiag.errors import InputError
from geodiag.io.vocabulary.sidecar import load
from gti.cli import app
from gti.evaluate.metrics import topk_metrics
from gti.evaluate.rankings import Rankings, load_rankings
from gti.experiment.layout import curve_file, final_file
from gti.study.assemble import collect
from gti.study.assemble.collect import paired, paired_curve, versus_baselines
from gti.study.assemble.tables import paired_table
from gti.study.config import StudyConfig, load_study_config
from gti.study.run import (
    milestone_rankings,
    record_geometry,
    run_all,
    run_one,
    sft_step_seconds,
)

runner = CliRunner()


def tiny_study(tmp_path: Path, model_dir: Path, *, arms=("mean", "gti"), seeds=(0, 1)) -> Path:
    text = f"""
    name = "tiny-study"
    work = "{tmp_path / "work"}"
    reports = "{tmp_path / "reports"}"
    seeds = {list(seeds)}
    arms = {json.dumps(list(arms))}
    fractions = [0.0, 0.5, 1.0]
    threads = 1
    permutations = 20

    [sids]
    data = "synthetic"
    model = "{model_dir}"
    encoder = "bow"

    [sids.rqvae]
    n_levels = 3
    codebook_size = 8
    epochs = 5
    batch_size = 64
    hidden_dims = [64, 32]
    latent_dim = 16

    [grounding]
    steps = 2
    batch_size = 4

    [sft]
    steps = 4
    batch_size = 4
    micro_batch_size = 2
    lr = 3e-3
    warmup_steps = 1
    k_core = 1
    save_every = 1

    [evaluate]
    beams = 20
    batch_size = 16
    """
    path = tmp_path / "study.toml"
    path.write_text(textwrap.dedent(text))
    return path


def files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def expected_run_files(with_report: bool) -> list[str]:
    names = [
        "run.json",
        "timings.jsonl",
        "geometry.json",
        "train_log.jsonl",
        "final/test.rankings.json",
    ]
    names += [curve_file(s, "valid") for s in (0, 2, 4)]
    names += ["report.html"] if with_report else []
    return sorted(names)


def test_study_runs_assembles_and_reruns_nothing(tmp_path, tiny_model_dir):
    cfg = load_study_config(tiny_study(tmp_path, tiny_model_dir))
    cfg.progress = False
    assert cfg.milestones() == [0, 2, 4]
    assert cfg.ordered_runs() == [("mean", 0), ("mean", 1), ("gti", 0), ("gti", 1)]
    dirs = run_all(cfg, command="test")
    reports = tmp_path / "reports"
    for arm in ("mean", "gti"):
        for seed in (0, 1):
            got = files(reports / "runs" / f"{arm}-seed{seed}")
            assert got == expected_run_files(with_report=seed == 0), (arm, seed)
    # No weights in the report folder; intermediate milestone checkpoints are deleted.
    assert not list(reports.rglob("*.safetensors"))
    assert not (tmp_path / "work" / "mean-seed0" / "step-2").exists()
    assert (tmp_path / "work" / "mean-seed0" / "sft" / "model.safetensors").is_file()

    run = json.loads((dirs[0] / "run.json").read_text())
    assert run["status"] == "complete" and run["milestones"] == [0, 2, 4]
    assert run["tokens_per_example"]["tokens"] > run["tokens_per_example"]["answer_tokens"] > 0
    steps = [json.loads(line) for line in (dirs[0] / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    assert run["sft_step_seconds"] == pytest.approx(sum(r["seconds"] for r in steps), abs=0.05)
    want = 16 / sum(r["seconds"] for r in steps)  # 4 steps x 4 examples
    assert run["sft_examples_per_s"] == pytest.approx(want, rel=1e-3)
    geo = json.loads((dirs[0] / "geometry.json").read_text())
    assert list(geo) == ["0", "2", "4"] and geo["4"]["examples"] == 16
    # Mean init: every new row equal, so the figures say collapsed (spread 0) at step 0,
    # and SFT moves the rows apart.
    assert geo["0"]["spread_relative"] == pytest.approx(0, abs=1e-6)
    assert geo["4"]["spread_relative"] > 0

    # A re-run finds every run complete and writes nothing.
    before = {p: p.stat().st_mtime_ns for p in reports.rglob("*") if p.is_file()}
    run_all(cfg, command="test")
    assert {p: p.stat().st_mtime_ns for p in reports.rglob("*") if p.is_file()} == before

    result = runner.invoke(app, ["study", "assemble", str(reports), "--resamples", "200"])
    assert result.exit_code == 0, result.output
    assert {
        "results.md",
        "results.json",
        "learning_curves.png",
        "geometry.png",
        "spectra.png",
        "learning_curves_paired.png",
    } <= set(files(reports))
    res = json.loads((reports / "results.json").read_text())
    assert res == collect(reports, n_resamples=200)  # deterministic, from the files alone

    # Assemble's numbers = the mean over seeds of metrics recomputed independently.
    for arm in ("mean", "gti"):
        for pt in res["arms"][arm]["curve"]:
            per_seed = []
            for seed in (0, 1):
                r = load_rankings(
                    reports / "runs" / f"{arm}-seed{seed}" / curve_file(pt["step"], "valid")
                )
                per_seed.append(recompute(r))
                got = res["arms"][arm]["per_seed"][str(seed)]["curve"]
                got = next(row for row in got if row["step"] == pt["step"])
                for metric in ("recall@10", "recall@20", "ndcg@10"):
                    assert got[metric] == pytest.approx(per_seed[-1][metric], abs=1e-12)
            for metric, ci in pt["metrics"].items():
                want = np.mean([m[metric] for m in per_seed])
                assert ci["estimate"] == pytest.approx(want, abs=1e-12)
                assert ci["low"] <= ci["estimate"] <= ci["high"]
        test = res["arms"][arm]["final"]["test"]["metrics"]["recall@20"]["estimate"]
        want = np.mean(
            [
                recompute(
                    load_rankings(reports / "runs" / f"{arm}-seed{s}" / "final/test.rankings.json")
                )["recall@20"]
                for s in (0, 1)
            ]
        )
        assert test == pytest.approx(want, abs=1e-12)
    diff = res["paired"]["gti - mean (test)"]["metrics"]["recall@10"]["difference"]["estimate"]
    assert diff == pytest.approx(
        res["arms"]["gti"]["final"]["test"]["metrics"]["recall@10"]["estimate"]
        - res["arms"]["mean"]["final"]["test"]["metrics"]["recall@10"]["estimate"],
        abs=1e-12,
    )
    # ... with its relative gain beside it (tested on planted hits below; on this tiny
    # world some resample leaves mean without a hit, so the ratio is undefined).
    assert "relative" in res["paired"]["gti - mean (test)"]["metrics"]["recall@10"]
    # Along the curve: the paired difference at each milestone is the difference of the
    # two arms' curve estimates (same users, same seeds).
    rows = res["paired_curve"]["gti - mean"]
    assert [r["step"] for r in rows] == [0, 2, 4]
    for row, pg, pm in zip(
        rows, res["arms"]["gti"]["curve"], res["arms"]["mean"]["curve"], strict=True
    ):
        for metric in ("recall@10", "recall@20"):
            got = row["metrics"][metric]["difference"]["estimate"]
            want = pg["metrics"][metric]["estimate"] - pm["metrics"][metric]["estimate"]
            assert got == pytest.approx(want, abs=1e-12)
    assert res["versus_baselines"] == []  # this study folder has no baselines/
    md = (reports / "results.md").read_text()
    assert "| gti - mean (test) | 2 | recall@10 |" in md
    assert "| gti - mean | 4 | 16 | 2 |" in md
    seed1 = res["arms"]["gti"]["per_seed"]["1"]
    cells = [
        f"{c['recall@10']:.4f} / {c['recall@20']:.4f}"
        for c in [*seed1["curve"], seed1["final"]["test"]]
    ]
    assert "| 1 | " + " | ".join(cells) + " |" in md
    # Geometry rows: the mean over seeds of each run's geometry.json, with the count of
    # seeds whose RSA permutation p is below 0.05 (recomputed here from the files).
    geos = [
        json.loads((reports / "runs" / f"gti-seed{s}" / "geometry.json").read_text())
        for s in (0, 1)
    ]
    last = geos[0]["4"]
    rsa = []
    for lv in last["levels"]:
        vals = [
            g["4"]["levels"][lv]["rsa"] for g in geos if g["4"]["levels"][lv]["rsa"] is not None
        ]
        ps = [
            g["4"]["levels"][lv]["rsa_p"] for g in geos if g["4"]["levels"][lv]["rsa_p"] is not None
        ]
        if not vals:
            rsa.append(f"{lv} -")
            continue
        rsa.append(f"{lv} {np.mean(vals):.3f} ({sum(p < 0.05 for p in ps)}/{len(ps)})")
    row = " | ".join(
        f"{np.mean([g['4'][k] for g in geos]):.3f}"
        for k in ("effective_rank", "centered_effective_rank", "spread_relative", "mean_cosine")
    )
    assert f"| gti | 4 | {row} | " + ", ".join(rsa) + " |" in md
    # The mean init is one point: centered rank and spread 0, RSA undefined ("-", no count).
    geometry_md = md.split("## geometry through SFT")[1].split("\n## ")[0]
    (row,) = [line for line in geometry_md.splitlines() if line.startswith("| mean | 0 | ")]
    cells = row.strip("| ").split(" | ")
    assert cells[2:6] == ["1.000", "0.000", "0.000", "1.000"], row
    assert all(part.endswith(" -") for part in cells[6].split(", ")), row

    check_geometry_intervals(tmp_path, reports)


def check_geometry_intervals(tmp_path: Path, reports: Path) -> None:
    """`gti study geometry-intervals` on the tiny study's weights: its full-sample RSA is
    each run's geometry.json value (init = step 0, final = step 4), the mean init (all
    rows equal) has none, and assemble renders the table or says what no longer
    matches."""
    study = tmp_path / "study.toml"
    args = ["study", "geometry-intervals", str(study), "--resamples", "50", "--no-progress"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    doc = json.loads((reports / "geometry_intervals.json").read_text())
    got = {(r["arm"], r["stage"], r["level"]): r for r in doc["rsa"]}
    for arm in ("mean", "gti"):
        geos = [
            json.loads((reports / "runs" / f"{arm}-seed{s}" / "geometry.json").read_text())
            for s in (0, 1)
        ]
        for stage, step in (("init", "0"), ("final", "4")):
            for lv in geos[0][step]["levels"]:
                want = [g[step]["levels"][lv]["rsa"] for g in geos]
                if None in want:  # mean init (rows equal), or a level without codebook
                    assert want == [None, None] and (arm, stage, lv) not in got
                    continue
                row = got[(arm, stage, lv)]
                assert row["seeds"] == [0, 1]
                assert row["per_seed"] == pytest.approx(want, abs=1e-12)
                assert row["estimate"] == pytest.approx(np.mean(want), abs=1e-12)
    assert ("gti", "final", "a") in got and ("mean", "final", "a") in got
    assert not [k for k in got if k[0] == "mean" and k[1] == "init"]
    (diff,) = [r for r in doc["paired"] if r["comparison"] == "gti - mean" and r["level"] == "a"]
    assert diff["estimate"] == pytest.approx(
        got[("gti", "final", "a")]["estimate"] - got[("mean", "final", "a")]["estimate"], abs=1e-12
    )
    assert {r["arm"] for r in doc["through_sft"]} == {"gti"}  # mean's init has no RSA

    runner.invoke(app, ["study", "assemble", str(reports), "--resamples", "50"])
    md = (reports / "results.md").read_text()
    assert "## RSA with intervals" in md and "Does not match" not in md
    # A value that no longer matches its run (or a run it does not cover) is flagged.
    doc["rsa"][0]["per_seed"][0] += 0.01
    doc["checkpoints"] = [c for c in doc["checkpoints"] if c["seed"] == 0]
    (reports / "geometry_intervals.json").write_text(json.dumps(doc))
    runner.invoke(app, ["study", "assemble", str(reports), "--resamples", "50"])
    md = (reports / "results.md").read_text()
    assert "Does not match the runs' geometry.json" in md
    assert "mean seed 1: a complete run the file does not cover" in md
    # A run still training (a grown plan) has no final for the file to cover: not flagged.
    run_path = reports / "runs" / "gti-seed1" / "run.json"
    done = run_path.read_text()
    grown = json.loads(done) | {"status": "in progress", "measured": [0, 2, 4]}
    grown["milestones"] = [0, 2, 4, 8]
    run_path.write_text(json.dumps(grown))
    runner.invoke(app, ["study", "assemble", str(reports), "--resamples", "50"])
    md = (reports / "results.md").read_text()
    assert "Runs still training" in md and "Runs complete under an earlier plan" not in md
    assert "gti seed 1: measured steps [0, 2, 4] of [0, 2, 4, 8]" in md
    assert "mean seed 1: a complete run" in md and "gti seed 1: a complete run" not in md
    run_path.write_text(done)

    # Weights that are not those of the committed runs: exit 2, nothing written.
    geo_path = reports / "runs" / "gti-seed0" / "geometry.json"
    original = geo_path.read_text()
    geo = json.loads(original)
    geo["4"]["levels"]["a"]["rsa"] += 0.01
    geo_path.write_text(json.dumps(geo))
    before = (reports / "geometry_intervals.json").read_text()
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "differs from the runs' geometry.json" in result.output
    assert (reports / "geometry_intervals.json").read_text() == before
    geo_path.write_text(original)

    # An init rebuilt after step 0 was recorded (step 0 names another build, with other
    # figures): checked by the digest its last milestone records, and said in results.md;
    # a last milestone that descends from another build than the init here: exit 2.
    geo = json.loads(original)
    assert all(g.get("init_digest") for g in geo.values())
    geo["0"]["init_digest"] = "xxh3_128:" + "0" * 32
    geo["0"]["levels"]["a"]["rsa"] += 0.01
    geo_path.write_text(json.dumps(geo))
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    runner.invoke(app, ["study", "assemble", str(reports), "--resamples", "50"])
    md = (reports / "results.md").read_text()
    assert "Does not match" not in md
    assert (
        "gti seed 0: its init here is the build" in md
        and "names another build" in md
        and "gti seed 1: its init" not in md
    )
    geo["4"]["init_digest"] = "xxh3_128:" + "1" * 32
    geo_path.write_text(json.dumps(geo))
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "descends from xxh3_128:111" in result.output
    geo_path.write_text(original)
    assert runner.invoke(app, args).exit_code == 0

    # Weights gone for one run: it is left out by name; gone for all: exit 2.
    (tmp_path / "work" / "gti-seed1" / "sft" / "model.safetensors").unlink()
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "left out: gti-seed1: complete, but no weights" in result.output
    doc = json.loads((reports / "geometry_intervals.json").read_text())
    assert got[("gti", "final", "a")]["per_seed"][0] == pytest.approx(
        next(
            r
            for r in doc["rsa"]
            if r["arm"] == "gti" and r["stage"] == "final" and r["level"] == "a"
        )["per_seed"][0],
        abs=1e-12,
    )
    for p in (tmp_path / "work").glob("*-seed*/sft/model.safetensors"):
        p.unlink()
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "no complete run has its weights" in result.output


def recompute(r) -> dict[str, float]:
    """Metrics via gti.evaluate.metrics on integer ids (-1 pads short lists)."""
    index = {item: i for i, item in enumerate(sorted({*r.targets, *sum(r.ranked, [])}))}
    ranked = np.full((len(r.users), r.top), -1)
    for row, lst in enumerate(r.ranked):
        ranked[row, : len(lst)] = [index[i] for i in lst]
    targets = np.array([index[t] for t in r.targets])
    return topk_metrics(ranked, targets, (5, 10, 20))


def test_bad_study_config_is_a_clear_error(tmp_path, tiny_model_dir):
    path = tiny_study(tmp_path, tiny_model_dir)
    path.write_text(path.read_text().replace("fractions = [0.0, 0.5, 1.0]", "fractions = [0.5]"))
    result = runner.invoke(app, ["study", "run", str(path)])
    assert result.exit_code == 2 and "fractions must include 1" in result.output


def test_assemble_with_baselines_only_and_with_nothing(tmp_path):
    from gti.baselines.run import run_baselines

    run_baselines("synthetic", tmp_path / "study" / "baselines", k_core_min=1, n_resamples=100)
    result = runner.invoke(
        app, ["study", "assemble", str(tmp_path / "study"), "--resamples", "100"]
    )
    assert result.exit_code == 0, result.output
    md = (tmp_path / "study" / "results.md").read_text()
    assert "No measured (arm, seed) run yet" in md and "| baseline: transitions |" in md
    assert (tmp_path / "study" / "learning_curves.png").is_file()
    result = runner.invoke(app, ["study", "assemble", str(tmp_path / "empty")])
    assert result.exit_code == 2 and "neither measured runs" in result.output


def planted(hits: list[bool], split: str = "valid") -> Rankings:
    """Users u000, u001, ...; user i's target is ranked first where hits[i], else absent."""
    users = [f"u{i:03d}" for i in range(len(hits))]
    targets = [f"t{i}" for i in range(len(hits))]
    ranked = [[t if h else "x", "y"] for t, h in zip(targets, hits, strict=True)]
    return Rankings(split=split, users=users, targets=targets, ranked=ranked, top=20)


def test_curve_pairs_and_baseline_verdicts_on_planted_hits():
    # gti hits 8 of 10 users in both seeds at step 4, mean 2 of 10 (all of gti's misses
    # are also mean's); at step 0 both hit the same 3. Baseline "pop" hits 5 of 10.
    n = 10
    g4, m4 = [i < 8 for i in range(n)], [i < 2 for i in range(n)]
    same = [i < 3 for i in range(n)]
    curves = {
        "gti": {0: {0: planted(same), 1: planted(same)}, 4: {0: planted(g4), 1: planted(g4)}},
        "mean": {0: {0: planted(same), 1: planted(same)}, 4: {0: planted(m4), 1: planted(m4)}},
    }
    arms = {
        a: {
            "curve_split": "valid",
            "curve": [{"step": 0, "examples": 0}, {"step": 4, "examples": 16}],
        }
        for a in curves
    }
    rows = paired_curve(curves, arms, 2000, 0)["gti - mean"]
    assert [r["step"] for r in rows] == [0, 4] and rows[1]["seeds"] == [0, 1]
    step0, step4 = rows[0]["metrics"]["recall@20"], rows[1]["metrics"]["recall@20"]
    assert step0["difference"]["estimate"] == 0 and step0["p_value"] == 1.0
    assert step4["difference"]["estimate"] == pytest.approx(0.6)
    # 6 users, each +1 for gti and none against: the exact sign-flip p is 2 / 2^6.
    assert (step4["wins"], step4["losses"]) == (6, 0)
    assert step4["p_value"] == pytest.approx(2 / 64) and step4["exact"]

    base = {("pop", "valid"): planted([i % 2 == 0 for i in range(n)])}
    got = versus_baselines(curves, {a: {} for a in curves}, arms, base, 2000, 0)
    by = {(r["arm"], r["step"]): r for r in got}
    assert len(got) == 4 and all(r["baseline"] == "pop" for r in got)
    # gti at step 4 (users 0-7) against pop (users 0, 2, 4, 6, 8): users 1, 3, 5, 7 won,
    # user 8 lost.
    d = by[("gti", 4)]["metrics"]["recall@20"]
    assert d["difference"]["estimate"] == pytest.approx(0.3)
    assert (d["wins"], d["losses"]) == (4, 1)


def test_final_pairs_state_the_relative_gain_on_planted_hits():
    # Of 200 users, gti hits 8 in every 10 in both seeds, mean 2 of those 8:
    # gti / mean - 1 = 160 / 40 - 1 = +300%. random hits nobody: gti / random is undefined.
    n = 200
    finals = {
        "gti": {"test": {s: planted([i % 10 < 8 for i in range(n)], "test") for s in (0, 1)}},
        "mean": {"test": {s: planted([i % 10 < 2 for i in range(n)], "test") for s in (0, 1)}},
        "random": {"test": {s: planted([False] * n, "test") for s in (0, 1)}},
    }
    res = paired(finals, 2000, 0)
    rel = res["gti - mean (test)"]["metrics"]["recall@20"]["relative"]
    assert rel["estimate"] == pytest.approx(3.0)
    # mean's hits are a subset of gti's and a resample draws users for both arms at once,
    # so no resample has gti below mean: the interval stays at or above +0%.
    assert 0 <= rel["low"] < 3.0 < rel["high"]
    assert res["gti - random (test)"]["metrics"]["recall@20"]["relative"] is None
    md = "\n".join(paired_table({"paired": res}))
    assert "| A / B - 1 [95%] |" in md
    assert "| gti - mean (test) | 2 | recall@20 | 0.6000 [" in md and "| +300% [+" in md
    assert "| gti - random (test) | 2 | recall@20 | 0.8000 [" in md and "] | - |" in md


@pytest.mark.parametrize(
    ("arm_hits", "base_hits", "verdict"),
    [(True, False, "above"), (False, True, "below"), (True, True, "not distinguishable")],
)
def test_baseline_verdicts_follow_the_interval(arm_hits, base_hits, verdict):
    n = 50
    curves = {"gti": {4: {0: planted([arm_hits] * n)}}}
    arms = {"gti": {"curve_split": "valid", "curve": [{"step": 4, "examples": 16}]}}
    finals = {"gti": {"test": {0: planted([arm_hits] * n, "test")}}}
    base = {
        ("pop", "valid"): planted([base_hits] * n),
        ("pop", "test"): planted([base_hits] * n, "test"),
    }
    rows = versus_baselines(curves, finals, arms, base, 500, 0)
    assert [(r["split"], r["step"]) for r in rows] == [("valid", 4), ("test", 4)]
    for r in rows:
        assert r["verdict"] == {"recall@10": verdict, "recall@20": verdict}


def test_sft_step_seconds_counts_each_step_once_or_says_none(tmp_path):
    log = tmp_path / "train_log.jsonl"
    rows = [{"step": k, "seconds": 1.5 * k} for k in (1, 2, 3)]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert sft_step_seconds(log, 3) == pytest.approx(9.0)
    assert sft_step_seconds(log, 4) is None  # a step missing
    assert sft_step_seconds(tmp_path / "absent.jsonl", 3) is None


def test_run_record_of_gti_from_description_reads_its_own_init(tmp_path, monkeypatch):
    """The arm grounds from description-mean into init/gti-from-description-mean-seed<k>/
    (where run_one writes it); its run.json measures tokens per example on that folder,
    not on the gti arm's init/gti-seed<k>/ (which a study without the gti arm lacks)."""
    import gti.study.run as study_run
    from gti.study.config import StudyConfig

    read = []
    monkeypatch.setattr(
        study_run, "tokens_per_example", lambda cfg, task, init, n: read.append(init) or {}
    )
    monkeypatch.setattr(study_run, "machine", lambda: {})
    from gti.experiment.layout import study_paths

    cfg = StudyConfig(work=tmp_path / "work", reports=tmp_path / "reports")
    paths = study_paths(cfg.work, cfg.reports, "gti-from-description", 1)
    rdir = tmp_path / "reports" / "runs" / "gti-from-description-seed1"
    assert paths.result == rdir
    rdir.mkdir(parents=True)
    study_run.write_run_json(cfg, "gti-from-description", 1, paths, None, "cmd")
    assert read == [tmp_path / "work" / "init" / "gti-from-description-mean-seed1"]
    assert json.loads((rdir / "run.json").read_text())["arm"] == "gti-from-description"


def test_milestone_rankings_curve_split_then_final_splits_at_the_last(tmp_path):
    cfg = replace(StudyConfig(), curve_split="valid", final_splits=("test", "valid"))
    r = tmp_path / "r"
    assert milestone_rankings(cfg, r, 2, last=False) == [("valid", r / curve_file(2, "valid"))]
    assert milestone_rankings(cfg, r, 8, last=True) == [
        ("valid", r / curve_file(8, "valid")),
        ("test", r / final_file("test")),
        ("valid", r / final_file("valid")),  # the same split, measured again as a final one
    ]


def test_record_geometry_adds_a_step_and_keeps_steps_ascending(tmp_path, monkeypatch):
    import gti.study.geometry

    monkeypatch.setattr(
        gti.study.geometry, "measure", lambda ckpt, permutations, seed: {"rsa": seed}
    )
    cfg = replace(StudyConfig(), sft=replace(StudyConfig().sft, batch_size=4))
    geo = tmp_path / "geometry.json"
    record_geometry(cfg, 7, tmp_path, 10, geo)
    record_geometry(cfg, 7, tmp_path, 2, geo)
    got = json.loads(geo.read_text())
    assert list(got) == ["2", "10"]
    assert got["10"] == {"rsa": 7, "examples": 40}


def test_a_study_in_epochs_of_the_sequence_objective(tmp_path, tiny_model_dir):
    """`epochs` milestones with --objective sequence: the SFT steps follow from the
    stream's windows, run.json records steps per epoch, every milestone (the init's
    too) is ranked on packed-history prompts, and the assembled curve is in epochs."""
    from transformers import AutoTokenizer

    from gti.data.tasks import load_task_data
    from gti.sft.sequence import SequenceStream

    path = tiny_study(tmp_path, tiny_model_dir, arms=("mean",), seeds=(0,))
    text = path.read_text().replace("fractions = [0.0, 0.5, 1.0]", "epochs = [0.0, 0.5, 1.0]")
    text = text.replace("[sft]\n", '[sft]\nobjective = "sequence"\nwindow = 4\nstride = 3\n')
    path.write_text(text)
    cfg = load_study_config(path)
    cfg.progress = False
    (rdir,) = run_all(cfg, command="test")
    init = tmp_path / "work" / "init" / "mean-seed0"
    sids = load(init)
    task = load_task_data(sids, "synthetic", k_core_min=1, max_history=20)
    windows = SequenceStream(
        AutoTokenizer.from_pretrained(init), task, window=4, stride=3,
        prefix=cfg.sft.sequence_prefix, separator=cfg.sft.separator, seed=0,
    ).epoch_size  # fmt: skip
    per_epoch = windows / 4  # batch 4
    run = json.loads((rdir / "run.json").read_text())
    assert run["objective"] == "sequence" and run["epochs"] == [0.0, 0.5, 1.0]
    assert run["steps_per_epoch"] == pytest.approx(per_epoch)
    assert run["milestones"] == [0, round(per_epoch / 2), round(per_epoch)]
    sft_config = json.loads(
        (tmp_path / "work" / "mean-seed0" / "sft" / "sft_config.json").read_text()
    )
    assert sft_config["steps"] == round(per_epoch) and sft_config["objective"] == "sequence"
    result = runner.invoke(
        app, ["study", "assemble", str(tmp_path / "reports"), "--resamples", "50"]
    )
    assert result.exit_code == 0, result.output
    res = json.loads((tmp_path / "reports" / "results.json").read_text())
    epochs = [p["epochs"] for p in res["arms"]["mean"]["curve"]]
    # a milestone's epochs are its rounded steps over the steps per epoch
    assert epochs == [0.0, *(round(round(per_epoch * e) / per_epoch, 3) for e in (0.5, 1.0))]
    assert "| epochs |" in (tmp_path / "reports" / "results.md").read_text()


def test_a_run_cut_short_leaves_its_measured_milestones_to_assemble(
    tmp_path, tiny_model_dir, monkeypatch
):
    """A run killed before its last milestone leaves run.json "in progress" with the
    milestones it measured; assemble shows them (curve points with the seeds that have
    them, no final split for that run) and says the run is still training; the re-run
    finishes it and the status turns complete."""
    import gti.study.run as study_run

    cfg = load_study_config(tiny_study(tmp_path, tiny_model_dir, arms=("mean",), seeds=(0, 1)))
    cfg.progress = False
    run_all(cfg, command="test")  # seed 0 and 1 complete
    reports = tmp_path / "reports"
    seed1 = reports / "runs" / "mean-seed1"
    for p in [
        seed1 / "run.json",
        seed1 / "final" / "test.rankings.json",
        seed1 / curve_file(4, "valid"),
    ]:
        p.unlink()
    geo = json.loads((seed1 / "geometry.json").read_text())
    (seed1 / "geometry.json").write_text(json.dumps({k: v for k, v in geo.items() if k != "4"}))

    class Killed(Exception):
        pass

    real = study_run.measure_milestone

    def killed_at_the_last(cfg, arm, seed, step, *args, **kw):
        if step == 4:
            raise Killed
        return real(cfg, arm, seed, step, *args, **kw)

    monkeypatch.setattr(study_run, "measure_milestone", killed_at_the_last)
    with pytest.raises(Killed):
        run_all(cfg, command="test")
    doc = json.loads((seed1 / "run.json").read_text())
    assert doc["status"] == "in progress" and doc["measured"] == [0, 2]
    assert doc["milestones"] == [0, 2, 4]

    res = runner.invoke(app, ["study", "assemble", str(reports), "--resamples", "50"])
    assert res.exit_code == 0, res.output
    out = json.loads((reports / "results.json").read_text())["arms"]["mean"]
    assert [(p["step"], p["seeds"]) for p in out["curve"]] == [(0, [0, 1]), (2, [0, 1]), (4, [0])]
    assert out["final"]["test"]["seeds"] == [0]
    assert [r["status"] for r in out["runs"]] == ["complete", "in progress"]
    md = (reports / "results.md").read_text()
    assert "- mean seed 1: measured steps [0, 2] of [0, 2, 4]" in md

    monkeypatch.setattr(study_run, "measure_milestone", real)
    run_all(cfg, command="test")
    assert json.loads((seed1 / "run.json").read_text())["status"] == "complete"


def test_milestones_record_their_init_build_and_a_rebuilt_init_shows(
    tmp_path, tiny_model_dir, caplog
):
    """Every milestone's geometry records the sha256 of the init's weights; when the init
    on disk is not the build earlier milestones came from (a rebuilt init), the run warns,
    the new milestones record the new digest and results.md lists the run's two builds."""
    import xxhash
    from safetensors.torch import load_file, save_file

    cfg = load_study_config(tiny_study(tmp_path, tiny_model_dir, arms=("mean",), seeds=(0,)))
    cfg.progress = False
    (rdir,) = run_all(cfg, command="test")
    init = tmp_path / "work" / "init" / "mean-seed0"

    def digest() -> str:  # the files' bytes in name order, each name first
        h = xxhash.xxh3_128()
        for f in sorted(init.glob("*.safetensors")):
            h.update(f.name.encode() + b"\0" + f.read_bytes())
        return "xxh3_128:" + h.hexdigest()

    first = digest()
    geo = json.loads((rdir / "geometry.json").read_text())
    assert {g["init_digest"] for g in geo.values()} == {first}

    # the last milestone unmeasured, and the init replaced by a build one value apart
    for p in [
        rdir / "run.json",
        rdir / "final" / "test.rankings.json",
        rdir / curve_file(4, "valid"),
    ]:
        p.unlink()
    (rdir / "geometry.json").write_text(json.dumps({k: v for k, v in geo.items() if k != "4"}))
    shutil.rmtree(tmp_path / "work" / "mean-seed0" / "sft")
    weights = init / "model.safetensors"
    tensors = load_file(weights)
    name = next(k for k in tensors if "embed" in k)
    tensors[name][-1, 0] += 1e-3
    save_file(tensors, weights, metadata={"format": "pt"})
    second = digest()
    assert second != first

    with caplog.at_level("WARNING", logger="gti.study.run"):
        run_all(cfg, command="test")
    assert "not the build milestones [0, 2] were trained from" in caplog.text
    geo = json.loads((rdir / "geometry.json").read_text())
    assert [geo[s]["init_digest"] for s in ("0", "2", "4")] == [first, first, second]
    res = runner.invoke(app, ["study", "assemble", str(tmp_path / "reports"), "--resamples", "50"])
    assert res.exit_code == 0, res.output
    run = json.loads((tmp_path / "reports" / "results.json").read_text())["arms"]["mean"]["runs"]
    assert run[0]["init_builds"] == [
        {"digest": first, "steps": [0, 2]},
        {"digest": second, "steps": [4]},
    ]
    md = (tmp_path / "reports" / "results.md").read_text()
    short = [d.removeprefix("xxh3_128:")[:12] for d in (first, second)]
    assert f"- mean seed 0: steps [0, 2] from {short[0]}; steps [4] from {short[1]}" in md


def test_a_grown_plan_continues_from_the_kept_state_and_keeps_the_earlier_test(
    tmp_path, tiny_model_dir
):
    """Epochs added after a run completed: the old final becomes a milestone, its test
    lists move to curve/step-<n>.test (kept), SFT continues from the state kept at its
    last step (only the added steps train) and ends with the weights of one straight run
    of the longer plan; assemble pools the finals at the new last milestone, says which
    run is complete under the earlier plan, and pools the earlier plan's final step over
    both runs (one's final, the other's kept lists)."""
    from safetensors.torch import load_file

    def study(root: Path, steps: int, fractions: str) -> Path:
        root.mkdir(exist_ok=True)
        path = tiny_study(root, tiny_model_dir, arms=("mean",), seeds=(0, 1))
        text = path.read_text().replace("steps = 4\n", f"steps = {steps}\nmin_lr_ratio = 1.0\n")
        path.write_text(text.replace("fractions = [0.0, 0.5, 1.0]", f"fractions = {fractions}"))
        return path

    grown = tmp_path / "grown"
    cfg = load_study_config(study(grown, 4, "[0.0, 0.5, 1.0]"))  # milestones 0, 2, 4
    cfg.progress = False
    run_all(cfg, command="test")
    rdir = grown / "reports" / "runs" / "mean-seed0"
    test_at_4 = (rdir / "final" / "test.rankings.json").read_text()
    work = grown / "work" / "mean-seed0"
    kept = json.loads((work / "sft.partial" / "state" / "trainer_state.json").read_text())
    assert kept["step"] == 4

    cfg = load_study_config(study(grown, 8, "[0.0, 0.25, 0.5, 1.0]"))  # 0, 2, 4, 8
    cfg.progress = False
    run_one(cfg, "mean", 0, command="test")
    assert (rdir / curve_file(4, "test")).read_text() == test_at_4
    assert load_rankings(rdir / "final" / "test.rankings.json").source["step"] == 8
    assert [e["step"] for e in map(json.loads, (rdir / "train_log.jsonl").open())] == list(
        range(1, 9)
    )
    sft_stages = [
        json.loads(line)["stage"]
        for line in (rdir / "timings.jsonl").read_text().splitlines()
        if json.loads(line)["stage"].startswith("sft ->")
    ]
    assert sft_stages == ["sft ->2", "sft ->4", "sft ->8"]  # 2 and 4 not trained again
    assert sorted(json.loads((rdir / "geometry.json").read_text())) == ["0", "2", "4", "8"]

    straight = tmp_path / "straight"
    ref = load_study_config(study(straight, 8, "[0.0, 1.0]"))
    ref.progress = False
    run_one(ref, "mean", 0, command="test")
    a = load_file(straight / "work" / "mean-seed0" / "sft" / "model.safetensors")
    b = load_file(work / "sft" / "model.safetensors")
    assert a.keys() == b.keys()
    for k in a:  # one process, one thread, the same kernels: the same arithmetic
        assert torch.equal(a[k], b[k]), k

    res = runner.invoke(app, ["study", "assemble", str(grown / "reports"), "--resamples", "50"])
    assert res.exit_code == 0, res.output
    out = json.loads((grown / "reports" / "results.json").read_text())["arms"]["mean"]
    assert out["final"]["test"]["seeds"] == [0]
    assert [r["status"] for r in out["runs"]] == ["complete", "earlier plan"]
    md = (grown / "reports" / "results.md").read_text()
    assert "- mean seed 1: complete at step 4, an earlier plan's last milestone" in md
    assert "Runs complete under an earlier plan" in md
    # the earlier plan's final step pools both seeds' test lists there: seed 1's final and
    # the lists seed 0 kept when it grew
    (earlier,) = json.loads((grown / "reports" / "results.json").read_text())["earlier_finals"]
    assert earlier["step"] == 4 and earlier["arms"]["mean"]["test"]["seeds"] == [0, 1]
    hits = [  # recall@20 by hand: the target among the first 20 items, each user and seed
        row[1] in row[2][:20]
        for f in (
            rdir / curve_file(4, "test"),
            grown / "reports/runs/mean-seed1/final/test.rankings.json",
        )
        for row in json.loads(f.read_text())["users"]
    ]
    recall = earlier["arms"]["mean"]["test"]["metrics"]["recall@20"]["estimate"]
    assert recall == pytest.approx(sum(hits) / len(hits), abs=1e-12)
    assert "## test at step 4 (an earlier plan's final budget)" in md

    # the plan shrunk below a final checkpoint: refused, nothing deleted
    small = load_study_config(study(grown, 2, "[0.0, 1.0]"))
    small.progress = False
    with pytest.raises(InputError, match="past the plan's last milestone 2"):
        run_one(small, "mean", 0, command="test")
    assert (work / "sft" / "model.safetensors").is_file()
