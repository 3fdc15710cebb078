"""Every framework's SID map and codebooks give the figures our own sidecar route gives on
the same SIDs (RSA per level to 1e-9, dead codes, collisions), through ``geodiag metrics``,
``check`` and ``report``; a 1-based index is aligned or refused by name; files that
disagree are exit 2 naming the file, the item and the code; a planted pickle runs nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import sid_frameworks as fx
from geodiag_fixtures import one_line_exit_2
from typer.testing import CliRunner

from geodiag.cli import app

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[Path, dict[str, dict[str, Path]]]:
    out = tmp_path_factory.mktemp("frameworks")
    return out, fx.write_all(out)


def metrics(folder: Path, *flags) -> dict:
    res = run("metrics", folder, "--json", *flags)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def figures(report: dict) -> dict:
    """RSA per level, dead codes and collisions: what must agree across routes."""
    m = report["matrices"][0]
    book = report["codebook"]
    return {
        "rsa": {lv["name"]: lv["rsa"]["spearman"] for lv in m["levels"]},
        "dead": [lv["dead_codes"] for lv in book["levels"]],
        "perplexity": [lv["perplexity"] for lv in book["levels"]],
        "collisions": (book["n_colliding_items"], book["n_colliding_tuples"]),
        "n_items": book["n_items"],
    }


@pytest.fixture(scope="module")
def sidecar_figures(written) -> dict:
    out, _ = written
    return figures(metrics(out / "sidecar"))


@pytest.mark.parametrize("framework", list(fx.FRAMEWORKS))
def test_each_framework_gives_the_sidecar_figures(written, sidecar_figures, framework):
    _, files = written
    f = files[framework]
    got = figures(metrics(f["model"], "--sids", f["sids"], "--codebooks", f["codebooks"]))
    want = sidecar_figures
    assert got["rsa"].keys() == want["rsa"].keys() == {"a", "b", "c"}
    for level in want["rsa"]:
        assert got["rsa"][level] == pytest.approx(want["rsa"][level], abs=1e-9)
    assert got["dead"] == want["dead"] == [[], [], list(range(fx.K - fx.DEAD_C, fx.K))]
    assert got["collisions"] == want["collisions"]
    assert got["perplexity"] == pytest.approx(want["perplexity"], abs=1e-12)
    assert got["n_items"] == want["n_items"] == fx.N_ITEMS


def test_the_collisions_are_those_planted_and_counted_independently(sidecar_figures):
    codes = fx.sid_codes()
    _, counts = np.unique(codes, axis=0, return_counts=True)
    assert sidecar_figures["collisions"] == (int(counts[counts > 1].sum()), int((counts > 1).sum()))
    assert (counts > 1).sum() >= fx.N_PAIRS


def test_minionerec_codes_npy_with_its_npz(written, sidecar_figures):
    _, files = written
    f = files["minionerec"]
    # the .npy is 0-based; the model spells MiniOneRec's 1-based tokens: --sid-offset says
    # nothing here (the offset is the file's), so the 0-based codes meet <a_1>.. tokens
    model = fx.write_model(f["npy"].parent.parent / "model0", "letter")
    got = figures(metrics(model, "--sids", f["npy"], "--codebooks", f["codebooks"]))
    assert got["rsa"] == pytest.approx(sidecar_figures["rsa"], abs=1e-9)
    assert got["dead"] == sidecar_figures["dead"]


def test_check_and_report_agree_with_the_sidecar(written, tmp_path):
    out, files = written
    f = files["grid"]
    flags = ["--sids", f["sids"], "--codebooks", f["codebooks"]]
    ours_doc = json.loads(run("check", out / "sidecar", "--json").stdout)
    theirs_res = run("check", f["model"], "--json", *flags)
    assert theirs_res.exit_code == 0, theirs_res.output
    theirs_doc = json.loads(theirs_res.stdout)
    assert theirs_doc["passed"] is ours_doc["passed"] is True
    ours, theirs = ours_doc["results"][0], theirs_doc["results"][0]

    def rsa(result):
        return {
            c["name"][4:-1]: c["value"] for c in result["checks"] if c["name"].startswith("rsa[")
        }

    assert rsa(theirs).keys() == {"a", "b", "c"}
    assert rsa(theirs) == pytest.approx(rsa(ours), abs=1e-9)
    pytest.importorskip("matplotlib")
    res = run("report", f["model"], *flags, "--output", tmp_path / "grid.html")
    assert res.exit_code == 0, res.output
    page = json.loads((tmp_path / "grid.json").read_text())
    got = figures(page["checkpoints"][0]["report"])
    want = figures(metrics(out / "sidecar"))
    assert got["rsa"] == pytest.approx(rsa(ours), abs=1e-9)
    assert got["dead"] == want["dead"] and got["collisions"] == want["collisions"]
    assert "merged_predictions_tensor.pt" in (tmp_path / "grid.html").read_text()


def test_found_beside_the_checkpoint(written, tmp_path, sidecar_figures):
    _, files = written
    f = files["lcrec"]
    folder = tmp_path / "beside"
    shutil.copytree(f["model"], folder)
    shutil.copy(f["sids"], folder)
    shutil.copy(f["codebooks"], folder)
    report = metrics(folder)
    assert figures(report)["rsa"] == pytest.approx(sidecar_figures["rsa"], abs=1e-9)
    assert any("found beside the weights: Games.index.json" in n for n in report["notes"])


def test_one_based_without_code_k_is_refused_naming_the_offset(written, tmp_path):
    _, files = written
    f = files["minionerec"]
    index = json.loads(f["sids"].read_text())
    # drop every item using the top code of any level: no code K is left to tell
    index = {k: v for k, v in index.items() if not any(t.endswith(f"_{fx.K}>") for t in v)}
    path = tmp_path / "Games.index.json"
    path.write_text(json.dumps(index))
    res = run("metrics", f["model"], "--sids", path, "--codebooks", f["codebooks"])
    line = one_line_exit_2(res)
    assert str(path) in line and "--sid-offset 1" in line and "start at 0 or at 1" in line
    ok = metrics(f["model"], "--sids", path, "--codebooks", f["codebooks"], "--sid-offset", "1")
    assert any("codes start at 1 (--sid-offset)" in n for n in ok["notes"])


def test_one_based_is_aligned_and_stated(written):
    _, files = written
    f = files["minionerec"]
    report = metrics(f["model"], "--sids", f["sids"], "--codebooks", f["codebooks"])
    assert any("aligned, code c is codebook row c - 1" in n for n in report["notes"])


def test_a_code_beyond_the_codebook_names_file_item_and_code(written, tmp_path):
    _, files = written
    f = files["lcrec"]
    index = json.loads(f["sids"].read_text())
    index["7"][1] = f"<b_{fx.K + 3}>"
    path = tmp_path / "Games.index.json"
    path.write_text(json.dumps(index))
    line = one_line_exit_2(
        run("metrics", f["model"], "--sids", path, "--codebooks", f["codebooks"])
    )
    assert str(path) in line and "item 7" in line and f"code {fx.K + 3}" in line


def test_a_level_count_that_differs_is_exit_2(written, tmp_path):
    _, files = written
    f = files["lcrec"]
    index = {k: v[:2] for k, v in json.loads(f["sids"].read_text()).items()}
    path = tmp_path / "two.index.json"
    path.write_text(json.dumps(index))
    line = one_line_exit_2(
        run("metrics", f["model"], "--sids", path, "--codebooks", f["codebooks"])
    )
    assert "2 code levels" in line and "3 codebooks" in line and str(f["codebooks"]) in line


def test_items_naming_tokens_the_tokenizer_lacks(written):
    _, files = written
    # OpenOneRec's codes over a model spelled <a_12>: nothing is spelled <s_a_12>... the
    # integer map takes the tokenizer's spelling; LC-Rec's <a_12> index over an <s_a_12>
    # vocabulary names tokens it lacks
    lcrec, openonerec = files["lcrec"], files["openonerec"]
    res = run(
        "metrics", openonerec["model"], "--sids", lcrec["sids"], "--codebooks", lcrec["codebooks"]
    )
    line = one_line_exit_2(res)
    assert "item 0" in line and "'<a_" in line and "tokenizer.json lacks" in line


def test_the_planted_pth_is_refused_and_runs_nothing(written, tmp_path):
    _, files = written
    marker = tmp_path / "ran"
    planted = fx.write_planted(tmp_path / "planted", marker)
    f = files["lcrec"]
    res = run("check", f["model"], "--sids", f["sids"], "--codebooks", planted)
    line = one_line_exit_2(res)
    assert "refused" in line and "posix.system" in line and str(planted) in line
    assert not marker.exists()
    # found beside the weights, it is refused all the same
    folder = tmp_path / "beside"
    shutil.copytree(f["model"], folder)
    shutil.copy(f["sids"], folder)
    shutil.copy(planted, folder / "best_collision_model.pth")
    assert "refused" in one_line_exit_2(run("check", folder))
    assert not marker.exists()


@pytest.mark.parametrize(
    ("kind", "verdict", "code"), [("mean", "fail", 1), ("structured", "pass", 0)]
)
def test_a_minionerec_mean_extension_fails_and_a_structured_one_passes(
    written, tmp_path, kind, verdict, code
):
    _, files = written
    f = files["minionerec"]
    model = fx.write_model(tmp_path / kind, "letter1", kind, fx.dedup_tokens())
    res = run("check", model, "--json", "--sids", f["sids"], "--codebooks", f["codebooks"])
    assert res.exit_code == code, res.output
    doc = json.loads(res.stdout)
    assert doc["passed"] is (verdict == "pass")
    result = doc["results"][0]
    levels = {c["name"] for c in result["checks"] if c["name"].startswith("rsa[")}
    assert levels == {"rsa[a]", "rsa[b]", "rsa[c]"}


def test_one_based_without_codebooks_reads_from_the_tokenizer(written, sidecar_figures):
    _, files = written
    f = files["minionerec"]
    report = metrics(f["model"], "--sids", f["sids"])
    assert any("codes read as starting at 1" in n for n in report["notes"])
    book = report["codebook"]
    # no codebook: a level's size is the codes the tokenizer spells (<c_1>..<c_16>)
    assert [lv["dead_codes"] for lv in book["levels"]] == sidecar_figures["dead"]
    for lv in report["matrices"][0]["levels"]:
        reason = lv["rsa_skip_reason"]
        assert lv["rsa"] is None and "--codebooks FILE" in reason and "RSA skipped" in reason
    assert (book["n_colliding_items"], book["n_colliding_tuples"]) == sidecar_figures["collisions"]


def test_a_trainers_other_pickles_beside_are_passed_over(written, tmp_path, sidecar_figures):
    """A Trainer checkpoint's rng_state.pth (numpy globals the codebook reader refuses)
    matches '*.pth' but is no codebook: passed over, the real one found."""
    torch = pytest.importorskip("torch")
    _, files = written
    f = files["lcrec"]
    folder = tmp_path / "checkpoint-10"
    shutil.copytree(f["model"], folder)
    shutil.copy(f["sids"], folder)
    shutil.copy(f["codebooks"], folder / "tuned_model.pth")  # sorted after rng_state.pth
    torch.save(
        {"python": np.random.get_state(), "numpy": np.random.get_state()}, folder / "rng_state.pth"
    )
    report = metrics(folder)
    assert figures(report)["rsa"] == pytest.approx(sidecar_figures["rsa"], abs=1e-9)
    assert any("codebooks: tuned_model.pth" in n for n in report["notes"])
