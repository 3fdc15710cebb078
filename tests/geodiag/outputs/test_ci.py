"""The GitHub Action (action.yml) and the pre-commit hooks, run the way their hosts run them.

action.yml is parsed with a YAML parser; each `run:` step gets its `env:` with the
`${{ inputs.* }}` / `${{ github.action_path }}` expressions substituted as GitHub does,
and runs under `bash --noprofile --norc -eo pipefail` (GitHub's `shell: bash`) with
GITHUB_OUTPUT, GITHUB_STEP_SUMMARY and GITHUB_ACTIONS set. The pre-commit manifest is
validated with pre-commit's own schema, and the hook's entry runs on file names.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def load_action() -> dict:
    return yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))


def substitute(text: str, inputs: dict[str, str]) -> str:
    def value(m: re.Match) -> str:
        expr = m.group(1)
        if expr.startswith("inputs."):
            return inputs[expr.removeprefix("inputs.")]
        if expr == "github.action_path":
            return str(ROOT)
        raise AssertionError(f"expression the test does not model: {expr}")

    return EXPR.sub(value, str(text))


def run_action(tmp_path: Path, **given: str):
    """Run the composite action's `run:` steps; returns (exit code, outputs, summary, log)."""
    spec = load_action()
    inputs = {k: str(v.get("default", "")) for k, v in spec["inputs"].items()}
    for key, value in given.items():
        key = key.replace("_", "-")
        assert key in inputs, f"unknown input {key}"
        inputs[key] = value
    for key, v in spec["inputs"].items():
        assert not v.get("required") or inputs[key], f"required input {key} missing"
    output, summary = tmp_path / "gh_output", tmp_path / "gh_summary.md"
    output.write_text("")
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "GITHUB_OUTPUT": str(output),
        "GITHUB_STEP_SUMMARY": str(summary),
        "GITHUB_ACTIONS": "true",
        "GITHUB_ACTION_PATH": str(ROOT),
    }
    log, rc = [], 0
    for step in spec["runs"]["steps"]:
        if "uses" in step:  # setup-python: the runner's job, not modelled; check its guard
            assert step["uses"].startswith("actions/setup-python@")
            assert step["if"] == "inputs.python-version != ''"
            continue
        assert step["shell"] == "bash"
        assert "${{" not in step["run"], "inputs must reach scripts through env, not the script"
        step_env = {**env, **{k: substitute(v, inputs) for k, v in step.get("env", {}).items()}}
        script = tmp_path / "step.sh"
        script.write_text(step["run"])
        res = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
            env=step_env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
        )
        log.append(res.stdout + res.stderr)
        rc = res.returncode
        if rc:
            break  # a failed step ends the job
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
    return rc, outputs, summary.read_text() if summary.exists() else "", "\n".join(log)


def junit_counts(path: Path) -> tuple[int, int]:
    suites = ET.parse(path).getroot()
    tests = sum(int(s.get("tests")) for s in suites)
    failures = sum(int(s.get("failures")) for s in suites)
    return tests, failures


def test_action_passes_a_healthy_checkpoint(make_ckpt, tmp_path):
    ckpt = make_ckpt("random")
    rc, out, summary, log = run_action(
        tmp_path, checkpoints=str(ckpt), install="none", args="--permutations 50"
    )
    assert rc == 0, log
    assert out == {"passed": "true", "junit": "geodiag-junit.xml"}
    tests, failures = junit_counts(tmp_path / "geodiag-junit.xml")
    assert tests >= 4 and failures == 0
    assert f"### geodiag check `{ckpt}`: passed" in summary


def test_action_fails_the_job_on_a_collapsed_checkpoint(make_ckpt, tmp_path):
    make_ckpt("random")
    make_ckpt("mean")
    pattern = str(tmp_path / "*[mr]*")  # a glob, expanded by the step: mean and random
    rc, out, summary, log = run_action(
        tmp_path,
        checkpoints=f"{pattern}\n",
        install="none",
        junit="reports/gate.xml",
        args="--permutations 50",
    )
    assert rc == 1, log
    assert out == {"passed": "false", "junit": "reports/gate.xml"}
    tests, failures = junit_counts(tmp_path / "reports" / "gate.xml")
    assert failures >= 3  # mean init fails rank, spread and cosine
    assert "mean`: FAILED" in summary and "random`: passed" in summary
    assert "::error title=geodiag spread_relative::" in log


def test_action_writes_sarif_only_when_asked(make_ckpt, tmp_path):
    ckpt = make_ckpt("mean")
    common = dict(checkpoints=str(ckpt), install="none", args="--permutations 20")
    rc, out, _, log = run_action(tmp_path, **common, sarif="reports/gate.sarif")
    assert rc == 1, log
    assert out == {"passed": "false", "junit": "geodiag-junit.xml", "sarif": "reports/gate.sarif"}
    sarif = json.loads((tmp_path / "reports" / "gate.sarif").read_text(encoding="utf-8"))
    _, failures = junit_counts(tmp_path / "geodiag-junit.xml")
    errors = [r for r in sarif["runs"][0]["results"] if r["level"] == "error"]
    assert len(errors) == failures >= 3
    (tmp_path / "reports" / "gate.sarif").unlink()
    rc, out, _, log = run_action(tmp_path, **common)  # the default: no SARIF file
    assert rc == 1 and "sarif" not in out, log
    assert not (tmp_path / "reports" / "gate.sarif").exists()


def test_action_thresholds_and_config_inputs(make_ckpt, tmp_path):
    ckpt = make_ckpt("random")
    rc, out, _, log = run_action(
        tmp_path,
        checkpoints=str(ckpt),
        install="none",
        min_spread_ratio="100",
        args="--permutations 20",
    )
    assert rc == 1 and out["passed"] == "false", log
    case = [
        c
        for c in ET.parse(tmp_path / "geodiag-junit.xml").iter("testcase")
        if c.get("name") == "spread_relative"
    ][0]
    assert "< 100" in case.find("failure").get("message")
    cfg = tmp_path / "gate.toml"
    cfg.write_text("max_mean_cosine = -1\n")
    rc, _, _, log = run_action(
        tmp_path, checkpoints=str(ckpt), install="none", config=str(cfg), args="--permutations 20"
    )
    assert rc == 1 and "mean_pairwise_cosine" in log


def test_action_rejects_a_pattern_that_matches_nothing(tmp_path):
    rc, out, _, log = run_action(tmp_path, checkpoints="runs/*/checkpoint-*", install="none")
    assert rc == 2 and "no checkpoint matches 'runs/*/checkpoint-*'" in log
    assert out == {}


def test_action_installs_geodiag_from_its_own_checkout(make_ckpt, tmp_path):
    # --dry-run: resolve and build the action's checkout as pip would, without installing.
    rc, _, _, log = run_action(
        tmp_path,
        checkpoints=str(make_ckpt("random")),
        pip_args="--dry-run --no-deps --no-build-isolation",
        args="--permutations 10",
    )
    assert rc == 0, log
    assert "Would install geodiag-0.1.0" in log


def test_every_input_reaches_a_step():
    spec = load_action()
    used = " ".join(str(v) for s in spec["runs"]["steps"] for v in (s.get("env") or {}).values())
    used += " ".join(str(s.get("with", "")) for s in spec["runs"]["steps"])
    for name in spec["inputs"]:
        assert f"inputs.{name} " in used + " " or f"inputs.{name}}}" in used, name


# -- pre-commit ------------------------------------------------------------------------


def test_manifest_is_valid_for_pre_commit():
    clientlib = pytest.importorskip("pre_commit.clientlib")
    hooks = clientlib.load_manifest(str(ROOT / ".pre-commit-hooks.yaml"))
    by_id = {h["id"]: h for h in hooks}
    assert set(by_id) == {"geodiag-check", "geodiag-check-paths"}
    assert by_id["geodiag-check"]["language"] == "python"
    assert by_id["geodiag-check-paths"]["pass_filenames"] is False
    from geodiag.precommit import CHECKPOINT_FILE

    # The hook's files pattern is the entry's own notion of a checkpoint file.
    assert by_id["geodiag-check"]["files"] == CHECKPOINT_FILE.pattern
    files = re.compile(by_id["geodiag-check"]["files"])
    for name in (
        "runs/a/model.safetensors",
        "ck/model-00001-of-00002.safetensors",
        "ck/semantic_ids.json",
        "adapter/adapter_model.safetensors",
        "pytorch_model.bin",
    ):
        assert files.search(name), name
    for name in ("README.md", "src/model.py", "notmodel.safetensors.bak"):
        assert not files.search(name), name


def hook(*argv: str, cwd: Path):
    """The hook's entry as pre-commit runs it: args from the config, then file names."""
    exe = BIN / "geodiag-pre-commit"
    return subprocess.run([str(exe), *argv], cwd=cwd, capture_output=True, text=True)


def test_hook_checks_each_changed_folder_once(make_ckpt, tmp_path):
    good, bad = make_ckpt("random"), make_ckpt("mean")
    names = [good / "model.safetensors", good / "semantic_ids.json", good / "config.json"]
    res = hook("--permutations", "20", *map(str, names), cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count(f"{good}: PASS") == 1
    res = hook(
        "--permutations",
        "20",
        str(good / "model.safetensors"),
        str(bad / "codebooks.safetensors"),
        cwd=tmp_path,
    )
    assert res.returncode == 1
    assert f"{bad}: FAIL" in res.stdout and f"{good}: PASS" in res.stdout
    # thresholds from the hook's args
    res = hook(
        "--min-spread-ratio", "100", "--permutations", "20", str(good / "config.json"), cwd=tmp_path
    )
    assert res.returncode == 1


def test_hook_without_checkpoint_folders_passes(tmp_path):
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text("{}")  # a folder without weights
    res = hook(str(tmp_path / "cfg" / "config.json"), cwd=tmp_path)
    assert res.returncode == 0 and "nothing to check" in res.stdout


def test_explicit_form_entry_is_geodiag_check(make_ckpt, tmp_path):
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    entry = next(h["entry"] for h in hooks if h["id"] == "geodiag-check-paths").split()
    res = subprocess.run(
        [str(BIN / entry[0]), *entry[1:], str(make_ckpt("line")), "--permutations", "20"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert res.returncode == 1 and "effective_rank_ratio" in res.stdout
