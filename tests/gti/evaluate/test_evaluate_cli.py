"""``gti evaluate`` end to end on a tiny checkpoint over the synthetic catalog."""

from __future__ import annotations

import json
import os
import stat

import pytest
import typer
from typer.testing import CliRunner

from gti.evaluate.cli import evaluate

runner = CliRunner()
app = typer.Typer()
app.command("evaluate")(evaluate)
app.command("noop")(lambda: None)  # two commands: `evaluate` is a subcommand, as in gti


def test_writes_metrics_for_both_splits(synthetic_checkpoint, tmp_path):
    out = tmp_path / "eval.json"
    args = ["evaluate", str(synthetic_checkpoint), "-o", str(out), "--k-core", "1"]
    res = runner.invoke(app, [*args, "--max-users", "12", "--batch-size", "5", "--no-progress"])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval.json"]  # no temporary left
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask  # published, not mkstemp's 0600
    data = json.loads(out.read_text())
    assert data["format"] == "gti.evaluate" and data["method"] == "beam" and data["beams"] == 20
    assert data["settings"]["k_core"] == 1 and data["settings"]["max_users"] == 12
    for split in ("valid", "test"):
        s = data["splits"][split]
        assert s["n_users"] == 12
        names = [f"{m}@{k}" for k in (1, 5, 10, 20) for m in ("recall", "ndcg")]
        assert sorted(s["metrics"]) == sorted(names)
        assert all(0 <= v <= 1 for v in s["metrics"].values())
        assert s["metrics"]["recall@1"] <= s["metrics"]["recall@20"]
    printed = json.loads(res.stdout)
    assert printed["test"]["n_users"] == 12


@pytest.mark.numerics
def test_exact_agrees_with_a_beam_wider_than_the_catalog(synthetic_checkpoint):
    """With more beams than items nothing is pruned: beam search and --exact rank alike.

    In float64, where the two differ by ~1e-11 in a score (test_evaluate_decode.ATOL),
    so only exact ties could swap items; float32 rounding (~1e-5) could swap a near-tie
    at a cutoff K and change a metric."""
    common = ["--k-core", "1", "--max-users", "10", "--split", "test", "--no-progress"]
    common += ["--beams", "200", "--dtype", "float64"]
    beam = runner.invoke(app, ["evaluate", str(synthetic_checkpoint), *common])
    exact = runner.invoke(app, ["evaluate", str(synthetic_checkpoint), *common, "--exact"])
    assert beam.exit_code == 0 and exact.exit_code == 0, beam.output + exact.output
    assert json.loads(beam.stdout) == json.loads(exact.stdout)


def test_bad_input_exits_2(synthetic_checkpoint, tmp_path):
    res = runner.invoke(app, ["evaluate", str(synthetic_checkpoint), "--beams", "5"])
    assert res.exit_code == 2 and "--beams" in res.output
    res = runner.invoke(app, ["evaluate", str(tmp_path)])
    assert res.exit_code == 2 and "semantic_ids.json" in res.output


def test_prompt_settings_follow_the_checkpoint_then_the_flags(tmp_path):
    from gti.checkpoint_files import SFT_CONFIG_FILENAME
    from gti.evaluate.config import EvalConfig
    from gti.evaluate.run import prompt_settings
    from gti.options import PROMPT_DEFAULTS

    assert prompt_settings(EvalConfig(checkpoint=tmp_path)) == PROMPT_DEFAULTS
    trained = {"k_core": 3, "max_history": 7, "titles": True, "system_prompt": ""}
    (tmp_path / SFT_CONFIG_FILENAME).write_text(json.dumps(trained))
    assert prompt_settings(EvalConfig(checkpoint=tmp_path)) == trained
    given = EvalConfig(checkpoint=tmp_path, max_history=2, system_prompt="template")
    assert prompt_settings(given) == {**trained, "max_history": 2, "system_prompt": "template"}
