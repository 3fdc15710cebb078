"""`geodiag report` and `geodiag export-projector` through typer's CliRunner: the exact files written."""

from __future__ import annotations

import json

import numpy as np
from geodiag_fixtures import (
    BASE_VOCAB,
    DIM,
    LEVELS,
    base_rows,
    planted_new_rows,
    tokenizer_json,
    write_checkpoint,
)
from report_fixtures import Page, strict_json
from typer.testing import CliRunner

from geodiag.cli import app

runner = CliRunner()
N_NEW = sum(k for _, k in LEVELS)
EVIL = "<script>alert(1)</script>"
EVIL_TITLE = '<img src=x onerror=alert(2)>"'


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def files_under(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_report_writes_exactly_html_and_json(make_ckpt, tmp_path, monkeypatch):
    a, b = make_ckpt("grounded"), make_ckpt("random")
    monkeypatch.chdir(tmp_path)
    res = run(
        "report", a, b, "-o", "out/NAME.html", "--permutations", 20, "--seed", 1, "--title", "smoke"
    )
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["NAME.html", "NAME.json"]
    data = strict_json((tmp_path / "out" / "NAME.json").read_text())
    assert data["title"] == "smoke" and data["seed"] == 1 and data["n_permutations"] == 20
    assert [c["report"]["path"] for c in data["checkpoints"]] == [str(a), str(b)]
    assert data["command_line"].startswith("geodiag")


def test_report_default_output_is_reports_report_html(make_ckpt, tmp_path, monkeypatch):
    ckpt = make_ckpt("grounded")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    res = run("report", ckpt, "--permutations", 10)
    assert res.exit_code == 0, res.output
    assert files_under(work) == ["reports/report.html", "reports/report.json"]
    assert "replaced" not in res.output
    res = run("report", ckpt, "--permutations", 10)  # the same default file: says so
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[-1] == (
        "replaced reports/report.html and reports/report.json, written by an earlier run "
        "(give -o NAME.html to keep them)"
    )


def test_report_bad_input_writes_nothing(make_ckpt, tmp_path, monkeypatch):
    good = make_ckpt("grounded")
    monkeypatch.chdir(tmp_path)
    res = run("report", good, tmp_path / "missing", "-o", "out/r.html", "--permutations", 10)
    assert res.exit_code == 2 and "error:" in res.output
    assert not (tmp_path / "out").exists()
    res = run("report", good, "-o", "out/r.json")
    assert res.exit_code == 2 and "-o" in res.output


def test_report_failure_keeps_the_previous_report(make_ckpt, tmp_path, monkeypatch):
    good = make_ckpt("grounded")
    monkeypatch.chdir(tmp_path)
    assert run("report", good, "-o", "out/r.html", "--permutations", 10).exit_code == 0
    before = {p: (tmp_path / "out" / p).read_bytes() for p in ("r.html", "r.json")}
    res = run("report", good, tmp_path / "missing", "-o", "out/r.html", "--permutations", 10)
    assert res.exit_code == 2
    assert {p: (tmp_path / "out" / p).read_bytes() for p in before} == before
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["r.html", "r.json"]


def evil_checkpoint(tmp_path):
    """No sidecar; tokenizer.json adds a <script> token and tokens holding a tab and a newline."""
    names = [EVIL, "tab\there", "new\nline"] + [f"<z_{i}>" for i in range(N_NEW - 3)]
    root = write_checkpoint(
        tmp_path / "ck_<b>bold</b>",
        planted_new_rows("random", base_rows()),
        with_sidecar=False,
        with_tokenizer=False,
        with_codebooks=False,
    )
    (root / "tokenizer.json").write_text(json.dumps(tokenizer_json(BASE_VOCAB, names)))
    return root


def test_report_escapes_every_checkpoint_string(tmp_path, monkeypatch):
    root = evil_checkpoint(tmp_path)
    monkeypatch.chdir(tmp_path)
    res = run(
        "report",
        root,
        "--new-tokens",
        f"{BASE_VOCAB}:{BASE_VOCAB + N_NEW}",
        "-o",
        "out/e.html",
        "--title",
        EVIL_TITLE,
        "--permutations",
        10,
    )
    assert res.exit_code == 0, res.output
    html = (tmp_path / "out" / "e.html").read_text()
    assert EVIL not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(2)&gt;" in html
    assert "<b>bold</b>" not in html and "ck_&lt;b&gt;bold&lt;/b&gt;" in html
    page = Page(html)
    assert not [t for t, _ in page.tags if t in ("script", "b", "iframe", "object", "embed")]
    assert not [(t, k) for t, a in page.tags for k in a if k.lower().startswith("on")]
    data = strict_json((tmp_path / "out" / "e.json").read_text())
    assert data["title"] == EVIL_TITLE
    assert data["checkpoints"][0]["report"]["matrices"][0]["neighbors"][0]["token"] == EVIL


def test_export_projector_files(make_ckpt, tmp_path):
    ckpt = make_ckpt("grounded")
    out = tmp_path / "proj"
    res = run("export-projector", ckpt, "-o", out)
    assert res.exit_code == 0, res.output
    assert files_under(out) == ["metadata.tsv", "projector_config.pbtxt", "vectors.tsv"]
    vectors = np.loadtxt(out / "vectors.tsv", delimiter="\t")
    assert vectors.shape == (N_NEW, DIM)
    np.testing.assert_allclose(
        vectors, planted_new_rows("grounded", base_rows()).astype(np.float32), rtol=1e-6
    )
    meta = (out / "metadata.tsv").read_text().splitlines()
    assert (
        meta[0] == "token\tlevel\tcode" and meta[1] == "<a_0>\ta\t0" and meta[-1] == "<c_7>\tc\t7"
    )
    assert len(meta) == N_NEW + 1
    config = (out / "projector_config.pbtxt").read_text()
    assert config == (
        "embeddings {\n"
        '  tensor_name: "model.embed_tokens.weight (new tokens)"\n'
        '  tensor_path: "vectors.tsv"\n'
        '  metadata_path: "metadata.tsv"\n'
        "}\n"
    )


def test_export_projector_escapes_tabs_and_newlines(tmp_path):
    root = evil_checkpoint(tmp_path)
    res = run("export-projector", root, "-o", tmp_path / "proj")
    assert res.exit_code == 0, res.output
    meta = (tmp_path / "proj" / "metadata.tsv").read_text().split("\n")[:-1]
    assert len(meta) == N_NEW + 1 and all(line.count("\t") == 2 for line in meta)
    assert meta[1:4] == [f"{EVIL}\t\t", "tab\\there\t\t", "new\\nline\t\t"]


def test_export_projector_untied_head_gets_its_own_files(make_ckpt, tmp_path):
    head = np.random.default_rng(0).normal(size=(BASE_VOCAB + N_NEW, DIM))
    ckpt = make_ckpt("grounded", untied_head=head)
    res = run("export-projector", ckpt, "-o", tmp_path / "proj")
    assert res.exit_code == 0, res.output
    assert files_under(tmp_path / "proj") == [
        "metadata.tsv",
        "metadata_output.tsv",
        "projector_config.pbtxt",
        "vectors.tsv",
        "vectors_output.tsv",
    ]
    out = np.loadtxt(tmp_path / "proj" / "vectors_output.tsv", delimiter="\t")
    np.testing.assert_allclose(out, head[BASE_VOCAB:].astype(np.float32), rtol=1e-6)
    assert (tmp_path / "proj" / "projector_config.pbtxt").read_text().count("embeddings {") == 2


def test_report_shows_an_untied_head_as_its_own_matrix(make_ckpt, tmp_path):
    head = np.random.default_rng(0).normal(size=(BASE_VOCAB + N_NEW, DIM))
    ckpt = make_ckpt("grounded", untied_head=head)
    res = run("report", ckpt, "-o", tmp_path / "u.html", "--permutations", 10)
    assert res.exit_code == 0, res.output
    data = strict_json((tmp_path / "u.json").read_text())
    assert [m["role"] for m in data["checkpoints"][0]["report"]["matrices"]] == ["input", "output"]
    html = (tmp_path / "u.html").read_text()
    assert "test/init (output head)" in html  # the label comes from the sidecar provenance


def _hide_modules(monkeypatch, *names):
    """As if ``names`` were not installed: find_spec finds nothing for them."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n in names else real(n, *a)
    )


def test_report_without_the_plotting_extra_exits_2_with_the_install_line(
    make_ckpt, tmp_path, monkeypatch
):
    """The fast, offline twin of tests/geodiag/test_wheel.py's light-install check."""
    from geodiag.outputs.report.write import REPORT_INSTALL

    a = make_ckpt("random")
    _hide_modules(monkeypatch, "matplotlib")
    res = run("report", a, "-o", tmp_path / "r.html", "--permutations", 0)
    assert res.exit_code == 2, res.output
    assert res.output.strip() == (
        f"error: geodiag report: needs the plotting extra (no module matplotlib): {REPORT_INSTALL}"
    )
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "r.json").exists()
