"""``gti experiment configs/tiny.toml`` end to end: the exact files, a re-run that skips
everything, a re-run with one more arm that runs only that arm."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from geodiag.io.vocabulary import sidecar
from gti.experiment.cli import experiment
from gti.experiment.config import load_config
from gti.experiment.runner import resolved

runner = CliRunner()
app = typer.Typer()
app.command("experiment")(experiment)
app.command("noop")(lambda: None)  # two commands: `experiment` is a subcommand, as in gti

TINY = Path(__file__).parents[3] / "configs" / "tiny.toml"
HF = [
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
]
INIT = sorted([*HF, "semantic_ids.json", "codebooks.safetensors", "init_config.json"])
SFT = sorted(
    [*HF, "semantic_ids.json", "codebooks.safetensors", "sft_config.json", "train_log.jsonl"]
)


def tiny_toml(tmp_path: Path, model_dir: Path, arms: list[str]) -> Path:
    """configs/tiny.toml with the offline tiny model folder and fewer arms (test time): keys
    over the tiny preset, as a user's file sets them."""
    assert TINY.read_text().rstrip().endswith('preset = "tiny"')
    path = tmp_path / "tiny.toml"
    path.write_text(f'preset = "tiny"\narms = {json.dumps(arms)}\n[sids]\nmodel = "{model_dir}"\n')
    return path


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def expected_tree(arms: list[str], inits: list[str]) -> list[str]:
    files = [
        "experiment.json",
        "report.html",
        "report.json",
        "results.json",
        "results.md",
        "timings.jsonl",
    ]
    files += [f"sids/{f}" for f in ("codebooks.safetensors", "semantic_ids.json", "stats.json")]
    files += [f"seed-0/init/{s}/{f}" for s in inits for f in INIT]
    files += ["seed-0/init/gti/train_log.jsonl"] if "gti" in inits else []
    files += [f"seed-0/sft/{a}/{f}" for a in arms for f in SFT]
    files += [f"seed-0/eval/{a}.json" for a in arms]
    return sorted(files)


def test_tiny_end_to_end_and_idempotent(tmp_path, tiny_model_dir, caplog):
    caplog.set_level(logging.INFO, logger="gti.experiment")
    arms = ["mean", "random", "gti", "gti+lcrec"]
    config, out = tiny_toml(tmp_path, tiny_model_dir, arms), tmp_path / "run"
    res = runner.invoke(app, ["experiment", str(config), "-o", str(out), "--no-progress"])
    assert res.exit_code == 0, res.output
    assert tree(out) == expected_tree(arms, ["mean", "random", "gti"])
    assert res.stdout.strip().endswith(f"report: {out / 'report.html'}")
    # the last screen: every arm's verdict at both stages, the per-token counts
    screen = res.stdout[res.stdout.index("Geometry of the new tokens") :]
    assert re.search(r"^FAIL  mean, init$", screen, re.M), screen
    for arm in arms:
        assert re.search(
            rf"^(PASS|WARN|FAIL)  {re.escape(arm)}, 6 SFT steps x \d+ \(smoke\)$", screen, re.M
        ), screen
    assert "Per-token findings" in screen and "Recall left out" in screen
    assert "| R@1 |" not in res.stdout  # a recall table of a few users is noise

    for arm in arms:
        prov = sidecar.load(out / "seed-0" / "sft" / arm).provenance
        assert prov["stage"] == "sft" and prov["arm"] == arm
        assert prov["sft_tasks"] == ("lcrec" if arm == "gti+lcrec" else "next-item")
        assert prov["init_strategy"] == ("gti" if arm.startswith("gti") else arm)
    assert sidecar.load(out / "seed-0" / "init" / "gti").provenance["stage"] == "init"

    results = json.loads((out / "results.json").read_text())
    assert list(results["arms"]) == arms
    m = results["arms"]["gti"]["splits"]["test"]["metrics"]["recall@20"]
    assert m["n"] == 1 and m["std"] is None and 0 <= m["mean"] <= 1
    md = (out / "results.md").read_text()
    assert "## valid" in md and "## test" in md and "| gti+lcrec | 1 |" in md
    report = json.loads((out / "report.json").read_text())
    labels = [c["label"] for c in report["checkpoints"]]
    assert labels[:3] == ["mean/init", "random/init", "gti/init"] and len(labels) == 7

    # One timing record per stage that ran, in order; the table sums them per arm.
    timings = [json.loads(line) for line in (out / "timings.jsonl").read_text().splitlines()]
    stages = [t["stage"] for t in timings]
    assert stages[0] == "sids" and stages[-1] == "report"
    assert stages.count("seed 0 init mean") == 1 and len(stages) == 1 + 3 + 2 * len(arms) + 1
    assert all(t["seconds"] >= 0 for t in timings)
    sec = {t["stage"]: t["seconds"] for t in timings}
    row = re.search(r"(?m)^\| gti\+lcrec \| 0 \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|$", md)
    assert row is not None, md
    parts = [sec["seed 0 init gti"], sec["seed 0 sft gti+lcrec"], sec["seed 0 eval gti+lcrec"]]
    assert [int(c) for c in row.groups()[:3]] == [round(p) for p in parts]
    assert abs(int(row.group(4)) - sum(parts)) <= 1

    # Re-run: everything is found finished, nothing is rewritten.
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    res = runner.invoke(app, ["experiment", str(config), "-o", str(out), "--no-progress"])
    assert res.exit_code == 0, res.output
    changed = [p for p in stamps if p.stat().st_mtime_ns != stamps[p]]
    assert sorted(p.name for p in changed) == ["results.json", "results.md"]  # tables are cheap
    assert (out / "timings.jsonl").read_text().count("\n") == len(stages)  # nothing ran
    assert "= seed 0 sft gti: done" in caplog.text

    # One more arm: only its stages run (lcrec shares the mean init).
    config = tiny_toml(tmp_path, tiny_model_dir, [*arms, "lcrec"])
    res = runner.invoke(app, ["experiment", str(config), "-o", str(out), "--no-progress"])
    assert res.exit_code == 0, res.output
    assert tree(out) == expected_tree([*arms, "lcrec"], ["mean", "random", "gti"])
    assert stamps[out / "seed-0" / "sft" / "gti" / "model.safetensors"] == (
        (out / "seed-0" / "sft" / "gti" / "model.safetensors").stat().st_mtime_ns
    )


def test_changed_settings_are_refused(tmp_path, tiny_model_dir):
    config, out = tiny_toml(tmp_path, tiny_model_dir, ["mean"]), tmp_path / "run"
    before = resolved(load_config(config, out=out))
    before["sft"]["steps"] += 1  # as if a previous run had trained longer
    out.mkdir()
    (out / "experiment.json").write_text(json.dumps(before))
    res = runner.invoke(app, ["experiment", str(config), "-o", str(out), "--no-progress"])
    assert res.exit_code == 2, res.output
    assert "other settings ([sft] steps)" in res.output
    assert sorted(p.name for p in out.iterdir()) == ["experiment.json"]


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[sft]\nstepz = 3\n", "[sft] 'stepz' is not a known key"),
        ("[sft]\ninit = 'x'\n", "[sft] 'init' is set by the runner"),
        ("[sft]\nsteps = 'many'\n", "[sft] steps must be int"),
        ("arms = ['mean', 'best']\n", "unknown arm 'best'"),
        ("arms = ['mean']\nsft_arms = ['gti']\n", "'gti', which is not in arms"),
        ("[evaluate]\nbeams = 5\n", "--beams"),
        ("threads = -1\n", "threads must be >= 0"),
        ("[sids\n", "not valid TOML"),
    ],
)
def test_bad_config_exits_2(tmp_path, toml, message):
    config = tmp_path / "bad.toml"
    config.write_text(toml)
    res = runner.invoke(app, ["experiment", str(config), "-o", str(tmp_path / "run")])
    assert res.exit_code == 2, res.output
    assert message in res.output
    assert not (tmp_path / "run").exists()


def test_gti_from_another_start_grounds_its_own_init(tmp_path, tiny_model_dir):
    arms = ["gti", "gti-from-description", "gti-from-codebook-projection"]
    config, out = tiny_toml(tmp_path, tiny_model_dir, arms), tmp_path / "run"
    res = runner.invoke(app, ["experiment", str(config), "-o", str(out), "--no-progress"])
    assert res.exit_code == 0, res.output
    inits = out / "seed-0" / "init"
    assert sorted(p.name for p in inits.iterdir()) == [
        "gti",
        "gti-from-codebook-projection",
        "gti-from-description-mean",
    ]
    starts = {
        p.name: json.loads((p / "init_config.json").read_text())["start_from"]
        for p in inits.iterdir()
    }
    assert starts == {
        "gti": "mean",
        "gti-from-description-mean": "description-mean",
        "gti-from-codebook-projection": "codebook-projection",
    }
    prov = sidecar.load(out / "seed-0" / "sft" / "gti-from-description").provenance
    assert prov["init_strategy"] == "gti" and prov["arm"] == "gti-from-description"
    labels = [c["label"] for c in json.loads((out / "report.json").read_text())["checkpoints"]]
    # the report tells the two gti inits apart by their folders
    assert labels[:3] == [
        "gti/init (gti)",
        "gti/init (gti-from-description-mean)",
        "gti/init (gti-from-codebook-projection)",
    ]


def test_a_report_written_by_an_older_geodiag_is_rebuilt(tmp_path):
    """Same checkpoint list, older report format or other gate checks: not current."""
    import json

    from geodiag.gate.checks import GateConfig
    from geodiag.jsonio import dumps
    from geodiag.outputs.report.build import REPORT_FORMAT_VERSION
    from gti.experiment.runner import report_is_current

    inputs = [tmp_path / "a", tmp_path / "b"]
    report = tmp_path / "report.html"
    data = {
        "format_version": REPORT_FORMAT_VERSION,
        "gate_config": json.loads(dumps(GateConfig())),
        "checkpoints": [{"report": {"path": str(p)}} for p in inputs],
    }
    report.with_suffix(".json").write_text(json.dumps(data))
    assert report_is_current(report, inputs)
    assert not report_is_current(report, inputs[:1])
    old = {**data, "format_version": REPORT_FORMAT_VERSION - 1}
    report.with_suffix(".json").write_text(json.dumps(old))
    assert not report_is_current(report, inputs)
    fewer = {**data, "gate_config": {"min_spread_ratio": 0.05}}
    report.with_suffix(".json").write_text(json.dumps(fewer))
    assert not report_is_current(report, inputs)
