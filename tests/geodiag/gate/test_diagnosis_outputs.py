"""The verdict, its cause and its remedy reach every output as the terminal words them
(issue 42): check --json, metrics --json, the API's GateResult, JUnit and SARIF."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from geodiag_fixtures import base_rows, planted_new_rows, write_checkpoint
from typer.testing import CliRunner

import geodiag
from geodiag.cli import app
from geodiag.escape import markdown_cell

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_every_output_carries_the_terminals_diagnosis(tmp_path, monkeypatch):
    # transformers' mean_resizing, planted: the mean plus N(0, 1e-9 Sigma) noise, and no
    # sidecar (so no gti provenance): the verdict names the resize option as the cause.
    ckpt = write_checkpoint(
        tmp_path / "ckpt", planted_new_rows("mean-noise", base_rows()), with_sidecar=False
    )
    monkeypatch.chdir(tmp_path)  # no pyproject.toml: the documented defaults
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    text = run("check", ckpt, "--permutations", 10, "--junit", "j.xml", "--sarif", "s.sarif")
    assert text.exit_code == 1
    (said,) = [ln for ln in text.stdout.splitlines() if ln.startswith("  verdict: ")]
    (res,) = json.loads(run("check", ckpt, "--permutations", 10, "--json").stdout)["results"]
    assert said == f"  verdict: {res['verdict']}"
    assert "mean_resizing=True" in res["cause"] and "mean_resizing=False" in res["remedy"]
    assert f"; {res['cause']}; {res['remedy']}." in res["verdict"]  # made of the two
    diagnosis = (res["verdict"], res["cause"], res["remedy"])

    metrics = json.loads(run("metrics", ckpt, "--permutations", 10, "--json").stdout)
    assert (metrics["verdict"], metrics["cause"], metrics["remedy"]) == diagnosis
    assert metrics["passed"] is False and metrics["path"] == str(ckpt)

    api = geodiag.check(ckpt, n_permutations=10)
    assert (api.verdict, api.cause, api.remedy) == diagnosis and not api.passed

    failures = ET.parse(tmp_path / "j.xml").getroot().iter("failure")
    texts = [f.text for f in failures]
    assert len(texts) == sum(c["status"] == "fail" for c in res["checks"]) >= 2
    for t in texts:
        assert t.endswith(
            f"\n\nverdict: {res['verdict']}\ncause: {res['cause']}\nremedy: {res['remedy']}"
        )
    summary = (tmp_path / "summary.md").read_text()
    assert markdown_cell(res["verdict"]) in summary  # the job summary too
    sarif = json.loads((tmp_path / "s.sarif").read_text())["runs"][0]["results"]
    assert sarif and all(r["message"]["text"].endswith(f"Verdict: {res['verdict']}") for r in sarif)


def test_a_healthy_checkpoint_has_a_verdict_and_nothing_to_do(make_ckpt):
    res = geodiag.check(make_ckpt("grounded"), n_permutations=50)
    assert res.passed and res.verdict.startswith("Healthy")
    assert (res.cause, res.remedy) == (None, None)
