"""Trajectories in the report: checkpoint-N series, gti steps, trajectory JSONL files."""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest
from geodiag_fixtures import base_rows, planted_new_rows, write_checkpoint
from report_fixtures import Page, strict_json
from typer.testing import CliRunner

from geodiag.analysis.checkpoint import measure_checkpoint
from geodiag.analysis.options import AnalyzeOptions
from geodiag.cli import app
from geodiag.outputs.report import ReportOptions, write_report
from geodiag.outputs.report.html import resolve

OPTS = ReportOptions(n_permutations=20, command_line="geodiag report (test)")


def moving_rows(t: float) -> np.ndarray:
    """From the mean (t = 0) towards a grounded init (t = 1): rank and spread recover."""
    base = base_rows()
    return (1 - t) * planted_new_rows("mean", base) + t * planted_new_rows("grounded", base)


def hf_run(root, steps=(2, 5, 10)):
    """Trainer-style output folder: run/checkpoint-N, N out of glob order."""
    for i, step in enumerate(steps):
        rows = moving_rows((i + 1) / len(steps))  # no sidecar: new rows from tokenizer.json
        write_checkpoint(root / "run" / f"checkpoint-{step}", rows, with_sidecar=False)
    # what `run/checkpoint-*` expands to: lexicographic, so 10 comes before 2
    return sorted((root / "run").glob("checkpoint-*"))


def shown(text: str, value) -> bool:
    """Is ``text`` the value as the report prints it (4 significant digits, RSA 3)?"""
    return text == "undefined" if value is None else text in (f"{value:.4g}", f"{value:.3g}")


def svg_text(uri: str) -> str:
    return base64.b64decode(uri.split(",", 1)[1]).decode("utf-8")


def test_checkpoint_folders_form_a_series_ordered_by_step(tmp_path):
    paths = hf_run(tmp_path)
    assert [p.name for p in paths] == ["checkpoint-10", "checkpoint-2", "checkpoint-5"]
    files = write_report(paths, tmp_path / "out" / "r.html", opts=OPTS)
    data = strict_json(files.json.read_text())
    assert [c["label"] for c in data["checkpoints"]] == [
        "checkpoint-2",
        "checkpoint-5",
        "checkpoint-10",
    ]
    (traj,) = data["trajectories"]
    assert traj["label"] == "run (checkpoints)" and traj["steps"] == [2, 5, 10]
    for i, step in enumerate((2, 5, 10)):
        ref = measure_checkpoint(
            tmp_path / "run" / f"checkpoint-{step}", AnalyzeOptions(n_permutations=20)
        )
        m = ref.matrices[0]
        assert traj["effective_rank_ratio"][i] == m.new.centered.effective_rank_ratio
        assert traj["spread_relative"][i] == m.new.spread_relative
        assert traj["mean_pairwise_cosine"][i] == m.new.mean_pairwise_cosine
        assert traj["rsa"]["b"][i] == m.levels[1].rsa.spearman
    assert traj["spread_relative"] == sorted(traj["spread_relative"])  # planted: spread grows
    # each later checkpoint is paired with the run's earliest, as its files say (not with
    # the one before it in the glob)
    assert [(d["before"], d["after"]) for d in data["drift"]] == [
        ("checkpoint-2", "checkpoint-5"),
        ("checkpoint-2", "checkpoint-10"),
    ]
    assert all("the run's earliest saved checkpoint" in p["why"] for p in data["pairs"])
    html = files.html.read_text()
    page = Page(html)
    assert "trajectory" in page.ids and "</span>Training trajectory</h2>" in html
    for ptr, text in page.marked:
        if ptr.startswith("/trajectories"):
            value = resolve(data, ptr)
            assert shown(text, value), ptr


def test_gti_checkpoints_order_by_sidecar_step(tmp_path):
    paths = []
    for step, t in ((400, 0.5), (0, 0.01), (800, 1.0)):
        prov = {"init_strategy": "mean", "stage": "sft", "step": step, "seed": 0}
        paths.append(write_checkpoint(tmp_path / f"sft-{step}", moving_rows(t), provenance=prov))
    data = strict_json(write_report(paths, tmp_path / "r.html", opts=OPTS).json.read_text())
    (traj,) = data["trajectories"]
    assert traj["steps"] == [0, 400, 800]
    assert traj["checkpoints"] == [str(tmp_path / f"sft-{s}") for s in (0, 400, 800)]


def test_no_series_no_section(tmp_path):
    paths = [write_checkpoint(tmp_path / "a", moving_rows(1.0))]
    files = write_report(paths, tmp_path / "r.html", opts=OPTS)
    assert strict_json(files.json.read_text())["trajectories"] == []
    assert 'id="trajectory"' not in files.html.read_text()


def train_log(path, with_code_accuracy=True):
    """A gti grounding train_log.jsonl: loss-only lines, and lines that carry structure."""
    lines = []
    for step in range(0, 50, 10):
        lines.append({"step": step, "loss": 3.0 - step / 50})
        structure = {
            "effective_rank_ratio": 0.1 + step / 100,
            "spread_relative": step / 50,
            "mean_pairwise_cosine": 1 - step / 60,
            "rsa": {"a": step / 500, "b": None},
            "rsa_p": {"a": 0.5, "b": None},
        }
        if with_code_accuracy:
            # as gti grounding writes them (issue 11): level a and the full SID
            structure["code_accuracy"] = {"a": step / 60, "sid": step / 120}
            structure["code_accuracy_chance"] = {"a": 1 / 8, "sid": 1 / 512}
        lines.append({"step": step, "elapsed_s": 2.0 * step, "structure": structure, "extra": 1})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_trajectory_jsonl_alone(tmp_path):
    log = train_log(tmp_path / "train_log.jsonl")
    files = write_report([log], tmp_path / "out" / "t.html", opts=OPTS)
    data = strict_json(files.json.read_text())
    assert data["checkpoints"] == []
    (traj,) = data["trajectories"]
    assert traj["steps"] == [0, 10, 20, 30, 40] and traj["elapsed_s"] == [0, 20, 40, 60, 80]
    assert traj["rsa"] == {"a": [0, 0.02, 0.04, 0.06, 0.08], "b": [None] * 5}
    assert traj["code_accuracy"]["sid"][-1] == pytest.approx(40 / 120)
    assert traj["code_accuracy_chance"]["sid"] == [1 / 512] * 5
    html = files.html.read_text()
    page = Page(html)
    assert "trajectory" in page.ids and "verdict" not in page.ids
    assert "<script" not in html.lower() and "Content-Security-Policy" in html
    (img,) = [a["src"] for tag, a in page.tags if tag == "img"]
    svg = svg_text(img)
    for title in (
        "effective-rank ratio",
        "RSA against the codebook",
        "code accuracy, per level",
        "code accuracy vs time",
        "elapsed seconds",
    ):
        assert title in svg, title
    for ptr, text in page.marked:
        value = resolve(data, ptr)
        assert shown(text, value), ptr


def test_code_accuracy_panels_only_when_present(tmp_path):
    log = train_log(tmp_path / "t.jsonl", with_code_accuracy=False)
    files = write_report([log], tmp_path / "t.html", opts=OPTS)
    (img,) = re.findall(r'src="(data:image/svg\+xml;base64,[^"]+)"', files.html.read_text())
    assert "code accuracy" not in svg_text(img)


def test_bad_trajectory_files_exit_2_and_write_nothing(tmp_path):
    runner = CliRunner()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": 0, "structure": {}}\nnot json\n{"step": 1, "structure": {}}\n')
    out = tmp_path / "out" / "r.html"
    res = runner.invoke(app, ["report", str(bad), "-o", str(out)])
    assert res.exit_code == 2 and "bad.jsonl: line 2 is not valid JSON" in res.output
    assert not out.parent.exists()
    loss_only = tmp_path / "loss.jsonl"
    loss_only.write_text('{"step": 0, "loss": 1.0}\n')
    res = runner.invoke(app, ["report", str(loss_only), "-o", str(out)])
    assert res.exit_code == 2 and "no line carries a 'structure'" in res.output


def test_a_killed_runs_half_line_is_a_note(tmp_path):
    log = train_log(tmp_path / "t.jsonl")
    log.write_text(log.read_text() + '{"step": 50, "elapsed_s": 1')
    files = write_report([log], tmp_path / "t.html", opts=OPTS)
    data = strict_json(files.json.read_text())
    assert data["trajectories"][0]["steps"][-1] == 40
    assert any("incomplete" in n for n in data["notes"])


def test_a_run_folder_stands_for_its_checkpoints_and_trajectory(tmp_path):
    hf_run(tmp_path)
    train_log(tmp_path / "run" / "geodiag_trajectory.jsonl", with_code_accuracy=False)
    data = strict_json(
        write_report([tmp_path / "run"], tmp_path / "r.html", opts=OPTS).json.read_text()
    )
    assert [c["label"] for c in data["checkpoints"]] == [
        "checkpoint-2",
        "checkpoint-5",
        "checkpoint-10",
    ]
    assert [(t["label"], t["steps"]) for t in data["trajectories"]] == [
        ("run/geodiag_trajectory.jsonl", [0, 10, 20, 30, 40]),
        ("run (checkpoints)", [2, 5, 10]),
    ]
