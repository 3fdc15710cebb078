"""The CLI through typer's CliRunner: exit codes, strict JSON, JUnit, GitHub outputs."""

import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from geodiag_fixtures import BASE_VOCAB, DIM, LEVELS, base_rows, planted_new_rows
from typer.testing import CliRunner

from geodiag.cli import app

runner = CliRunner()
N_NEW = sum(k for _, k in LEVELS)


def run(*args, env=None):
    return runner.invoke(app, [str(a) for a in args], env=env)


def strict_json(text: str):
    def no_constants(name):
        raise ValueError(f"non-strict JSON constant {name}")

    return json.loads(text, parse_constant=no_constants)


@pytest.mark.parametrize("kind", ["mean", "mean-noise", "line"])
def test_check_fails_every_collapse(make_ckpt, kind):
    res = run("check", make_ckpt(kind), "--permutations", 50)
    assert res.exit_code == 1, res.output
    assert "FAIL" in res.output


@pytest.mark.parametrize("kind", ["random", "grounded"])
def test_check_passes_healthy_inits(make_ckpt, kind):
    res = run("check", make_ckpt(kind), "--permutations", 50)
    assert res.exit_code == 0, res.output


def test_metrics_json_is_strict_even_for_exact_mean(make_ckpt):
    res = run("metrics", make_ckpt("mean"), "--json", "--permutations", 20)
    assert res.exit_code == 0, res.output
    out = strict_json(res.stdout)
    m = out["matrices"][0]
    assert m["new"]["centered"]["effective_rank"] == 0.0
    assert m["levels"][0]["rsa"]["spearman"] is None
    level = m["levels"][0]
    # The reason names the level's matrix in the user's terms, not "a (first matrix)".
    assert (
        f"rows of the embedding matrix of level '{level['name']}'"
        in level["rsa"]["undefined_reason"]
    )
    assert "identical" in level["rsa"]["undefined_reason"]
    assert out["n_new_tokens"] == N_NEW


def test_metrics_table_is_readable(make_ckpt):
    res = run("metrics", make_ckpt("grounded"), "--permutations", 50)
    assert res.exit_code == 0, res.output
    assert "effective rank (centered)" in res.output and "RSA vs codebook" in res.output
    assert "vocab reference" in res.output


def test_rsa_near_one_for_grounded_and_warns_for_random(make_ckpt):
    out = strict_json(run("metrics", make_ckpt("grounded"), "--json", "--permutations", 200).stdout)
    for lv in out["matrices"][0]["levels"]:
        assert lv["rsa"]["spearman"] > 0.8 and lv["rsa"]["p_value"] < 0.02
    res = run("check", make_ckpt("random"), "--permutations", 200)
    assert (
        res.exit_code == 0 and "[warn]" in res.output and "no trace of the codebook" in res.output
    )


def test_min_rsa_flag_fails_random(make_ckpt):
    assert (
        run("check", make_ckpt("random"), "--min-rsa", "0.5", "--permutations", 50).exit_code == 1
    )
    assert (
        run("check", make_ckpt("grounded"), "--min-rsa", "0.5", "--permutations", 50).exit_code == 0
    )


def test_junit_one_testcase_per_check(make_ckpt, tmp_path):
    junit = tmp_path / "out" / "gate.xml"
    res = run("check", make_ckpt("mean"), "--junit", junit, "--permutations", 20)
    assert res.exit_code == 1
    suite = ET.parse(junit).getroot().find("testsuite")
    cases = suite.findall("testcase")
    names = [c.get("name") for c in cases]
    assert {"effective_rank_ratio", "spread_relative", "mean_pairwise_cosine", "rsa[a]"} <= set(
        names
    )
    assert int(suite.get("tests")) == len(cases)
    assert int(suite.get("failures")) == sum(c.find("failure") is not None for c in cases) >= 3


def test_github_summary_and_error_lines(make_ckpt, tmp_path):
    summary = tmp_path / "summary.md"
    summary.write_text("before\n")
    env = {"GITHUB_STEP_SUMMARY": str(summary), "GITHUB_ACTIONS": "true"}
    res = run("check", make_ckpt("mean"), "--permutations", 20, env=env)
    assert res.exit_code == 1
    text = summary.read_text()
    assert text.startswith("before\n") and "| spread_relative | input | fail |" in text
    assert "::error title=geodiag spread_relative::" in res.stderr


def test_thresholds_from_config_file_and_pyproject(make_ckpt, tmp_path, monkeypatch):
    ckpt = make_ckpt("random")
    cfg = tmp_path / "gate.toml"
    cfg.write_text("[tool.geodiag]\nmin_effective_rank = 1000\n")
    assert run("check", ckpt, "--config", cfg, "--permutations", 20).exit_code == 1
    assert (
        run(
            "check", ckpt, "--config", cfg, "--min-effective-rank", "2", "--permutations", 20
        ).exit_code
        == 0
    )
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "pyproject.toml").write_text("[tool.geodiag]\nmax_mean_cosine = -0.5\n")
    monkeypatch.chdir(proj)
    assert run("check", ckpt, "--permutations", 20).exit_code == 1
    cfg.write_text("min_rank_typo = 3\n")
    res = run("check", ckpt, "--config", cfg)
    assert res.exit_code == 2 and "unknown gate setting 'min_rank_typo'" in res.stderr


def test_untied_head_gated_separately(make_ckpt):
    rng = np.random.default_rng(0)
    head = rng.normal(size=(BASE_VOCAB + N_NEW, DIM)) * 0.1
    head[BASE_VOCAB:] = head[:BASE_VOCAB].mean(axis=0)  # collapsed output rows only
    res = run("check", make_ckpt("random", untied_head=head), "--json", "--permutations", 20)
    assert res.exit_code == 1
    checks = strict_json(res.stdout)["results"][0]["checks"]
    fails = {(c["matrix"], c["name"]) for c in checks if c["status"] == "fail"}
    assert ("output", "spread_relative") in fails and not any(m == "input" for m, _ in fails)


def test_drift_command(make_ckpt):
    a = make_ckpt("grounded", name="init")
    moved = planted_new_rows("grounded", base_rows()) * 1.5 + 0.001
    b = make_ckpt(moved, name="sft")
    res = run("drift", a, b, "--json", "--permutations", 50)
    assert res.exit_code == 0, res.output
    d = strict_json(res.stdout)[0]["drift"]
    assert d["cosine_mean"] > 0.95 and d["structure_rsa"]["spearman"] > 0.9
    other = make_ckpt("random", name="other", with_sidecar=False, with_codebooks=False)
    assert (
        run("drift", a, other, "--permutations", 10).exit_code == 0
    )  # same names, from the tokenizer
    bare = make_ckpt("random", name="bare", with_sidecar=False, with_tokenizer=False)
    res = run("drift", a, bare, "--new-tokens", f"{BASE_VOCAB}:{BASE_VOCAB + 5}")
    assert res.exit_code == 2 and "new tokens differ" in res.stderr


@pytest.mark.parametrize("case", ["truncated", "missing", "nan", "range", "badsidecar", "nothing"])
def test_bad_input_exit_2_one_line(make_ckpt, tmp_path, case):
    rows = planted_new_rows("random", base_rows())
    if case == "nan":
        rows[3, 1] = np.nan
    root = make_ckpt(rows, name=case)
    args = ["metrics", root]
    if case == "truncated":
        weights = root / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:-100])
    elif case == "missing":
        args = ["metrics", tmp_path / "nope"]
    elif case == "range":
        root = make_ckpt(rows, name="range-flag", with_sidecar=False)
        args = ["metrics", root, "--new-tokens", f"{BASE_VOCAB}:99999"]
    elif case == "badsidecar":
        args += ["--sidecar", tmp_path / "nope.json"]
        (tmp_path / "nope.json").write_text("{bad json")
    elif case == "nothing":
        args = [
            "metrics",
            make_ckpt("random", name="bare", with_sidecar=False, with_tokenizer=False),
        ]
    res = run(*args)
    assert res.exit_code == 2, res.output
    err = res.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err
    assert res.stdout == ""
    if case == "nan":
        assert "NaN/Inf" in err and "--allow-nonfinite" in err
        ok = run("metrics", root, "--allow-nonfinite", "--json", "--permutations", 10)
        assert (
            ok.exit_code == 0
            and strict_json(ok.stdout)["matrices"][0]["nonfinite_rows_dropped"] == 1
        )


def test_usage_error_is_exit_2(make_ckpt):
    assert run("check").exit_code == 2
    assert run("metrics", make_ckpt("random"), "--new-tokens", "x:y").exit_code == 2
