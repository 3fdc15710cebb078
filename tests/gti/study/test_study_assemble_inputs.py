"""assemble's reading layer (gti.study.assemble.inputs) and single tables on planted
folders and documents: which runs count, what a Run opens, the baselines' lists, the
throughput figure's two sources, and a table's cells."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from geodiag.errors import InputError
from gti.evaluate.rankings import Rankings, rankings_file, save_rankings
from gti.experiment.layout import Files, curve_file, final_file, run_name, study_runs
from gti.study.assemble.inputs import Run, read_baselines, read_inputs, read_runs
from gti.study.assemble.tables import final_table, geometry_table


def lists(split: str, hits: int = 1) -> Rankings:
    users = ["u0", "u1", "u2"]
    ranked = [["t0"] if i < hits else ["x"] for i in range(3)]
    return Rankings(split=split, users=users, targets=["t0", "t0", "t0"], ranked=ranked)


def write_run(root: Path, arm: str, seed: int, status: str = "complete", **extra) -> Path:
    folder = study_runs(root) / run_name(arm, seed)
    folder.mkdir(parents=True)
    doc = {
        "status": status,
        "arm": arm,
        "seed": seed,
        "milestones": [0, 2],
        "examples_per_step": 4,
        "curve_split": "valid",
        "final_splits": ["test"],
        "stage_seconds": {"init mean": 1.0},
        "command": f"gti study run --arm {arm}",
        "machine": {"cpu": "x"},
        "sft_examples_per_s": 0.5,
        **extra,
    }
    (folder / Files.RUN).write_text(json.dumps(doc))
    return folder


def test_only_complete_runs_count_sorted_by_seed(tmp_path):
    write_run(tmp_path, "gti", 1)
    write_run(tmp_path, "gti", 0)
    write_run(tmp_path, "mean", 0, status="running")  # killed mid-run: not a result
    runs = read_runs(tmp_path)
    assert list(runs) == ["gti"] and [r.seed for r in runs["gti"]] == [0, 1]
    run = runs["gti"][0]
    assert isinstance(run, Run) and run.folder == study_runs(tmp_path) / "gti-seed0"
    assert (run.milestones, run.examples_per_step, run.final_splits) == ([0, 2], 4, ["test"])
    assert run.tokens_per_example is None  # an older run.json without it


def test_a_run_opens_its_lists_and_geometry_at_the_layout_names(tmp_path):
    folder = write_run(tmp_path, "gti", 0)
    (folder / Files.CURVE).mkdir()
    (folder / Files.FINAL).mkdir()
    save_rankings(folder / curve_file(2, "valid"), lists("valid", hits=2))
    save_rankings(folder / final_file("test"), lists("test", hits=3))
    (folder / Files.GEOMETRY).write_text(json.dumps({"0": {"effective_rank": 1.0}}))
    (run,) = read_runs(tmp_path)["gti"]
    assert run.curve(2) == lists("valid", hits=2)
    assert run.final("test") == lists("test", hits=3)
    assert run.geometry() == {"0": {"effective_rank": 1.0}}
    with pytest.raises(InputError):
        run.curve(0)  # not written: the error names the file


def test_examples_per_s_from_the_train_log_else_run_json(tmp_path):
    folder = write_run(tmp_path, "gti", 0)
    (run,) = read_runs(tmp_path)["gti"]
    assert run.examples_per_s() == 0.5  # no train log: run.json's figure
    rows = [{"step": 1, "seconds": 1.5}, {"step": 2, "seconds": 2.5}]
    (folder / Files.TRAIN_LOG).write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert run.examples_per_s() == 2 * 4 / 4.0  # 2 steps x 4 examples in 4 s of steps
    (folder / Files.TRAIN_LOG).write_text(json.dumps(rows[0]) + "\n")  # step 2 missing
    assert run.examples_per_s() == 0.5


def test_baselines_by_split_and_empty_folders_left_out(tmp_path):
    pop = tmp_path / Files.BASELINES / "most-popular"
    pop.mkdir(parents=True)
    (tmp_path / Files.BASELINES / "empty").mkdir()
    save_rankings(pop / rankings_file("test"), lists("test"))
    got = read_baselines(tmp_path)
    assert list(got) == ["most-popular"] and list(got["most-popular"]) == ["test"]
    assert got["most-popular"]["test"] == lists("test")
    inputs = read_inputs(tmp_path)
    assert inputs.runs == {} and inputs.baselines == got


def test_a_folder_with_neither_runs_nor_baselines_is_bad_input(tmp_path):
    write_run(tmp_path, "gti", 0, status="running")
    with pytest.raises(InputError, match="neither measured runs"):
        read_inputs(tmp_path)


def ci(x: float) -> dict[str, float]:
    return {"estimate": x, "low": x - 0.1, "high": x + 0.1}


def test_final_table_falls_back_to_the_curve_and_lists_baselines():
    metrics = {f"{m}@{k}": ci(0.5) for m in ("recall", "ndcg") for k in (5, 10)}
    res = {
        "ks": [5, 10],
        "arms": {
            "gti": {
                "seeds": [0],
                "final": {},
                "curve_split": "valid",
                "curve": [{"step": 3, "seeds": [0], "n_users": 3, "metrics": metrics}],
            },
        },
        "baselines": {"pop": {"test": {"n_users": 3, "metrics": metrics}}},
    }
    valid = final_table(res, "valid")
    assert valid[0] == "## valid, final budget" and valid[-1] == ""
    # the curve's last point, said to be one: its seeds and step
    assert valid[4].startswith("| gti (1 seed(s), step 3) | 3 | 0.5000 [0.4000, 0.6000] |")
    assert not any("baseline" in line for line in valid)  # pop has no valid lists
    assert [line.split(" | ")[0] for line in final_table(res, "test")[4:-1]] == ["| baseline: pop"]
    assert final_table({**res, "baselines": {}}, "test") == []


def test_geometry_table_marks_undefined_figures_and_counts_significant_seeds():
    spread = {"mean": 0.25}
    row = {
        "step": 4,
        "effective_rank": spread,
        "centered_effective_rank": None,  # mean init: undefined
        "spread_relative": spread,
        "mean_cosine": spread,
        "rsa": {"a": spread, "b": None},
        "rsa_p": {"a": [0.01, 0.2, None], "b": [None, None, None]},
    }
    lines = geometry_table({"arms": {"gti": {"geometry": [row]}}})
    assert "| gti | 4 | 0.250 | - | 0.250 | 0.250 | a 0.250 (1/2), b - |" in lines
