"""``gti init --sids INDEX --items ITEMS`` end to end on an LC-Rec-format dataset: the files
it writes, the index's own tokens, what it prints, ``geodiag check`` of the output, bad input."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import typer
from safetensors.numpy import load_file
from transformers import AutoTokenizer
from typer.testing import CliRunner

from geodiag.cli import app as geodiag_app
from gti.dropin.files import CHECKS_FILENAME, CHECKS_TEXT_FILENAME, SOURCE_FILENAME
from gti.init.cli import init

runner = CliRunner()
app = typer.Typer()
app.command("init")(init)
app.command("noop")(lambda: None)

OWN_FILES = {SOURCE_FILENAME, CHECKS_FILENAME, CHECKS_TEXT_FILENAME, "init_config.json"}


def gti_init(lcrec, model, out, *args):
    argv = ["init", "--sids", lcrec.index, "--items", lcrec.items, "--model", model, "-o", out]
    return runner.invoke(app, [*map(str, argv), "--no-progress", *map(str, args)])


def test_gti_writes_the_index_tokens_and_checks_them(lcrec, lcrec_model, tmp_path, monkeypatch):
    monkeypatch.chdir(lcrec.root)  # the framework's files named as a user types them: relative
    out = tmp_path / "out"
    argv = ["init", "--sids", lcrec.index.name, "--items", lcrec.items.name, "--model", lcrec_model]
    res = runner.invoke(
        app,
        [*map(str, argv), "-o", str(out), "--no-progress", "--codebooks", lcrec.codebooks.name]
        + ["--strategy", "gti", "--steps", "4", "--batch-size", "4"],
    )
    assert res.exit_code == 0, res.output
    files = {p.name for p in out.iterdir()}
    assert OWN_FILES | {"train_log.jsonl", "model.safetensors", "tokenizer.json"} <= files
    assert "semantic_ids.json" not in files  # the index is theirs: pointed at, not rewritten
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no .partial, no staging

    index = json.loads(lcrec.index.read_text())
    wanted = {t for toks in index.values() for t in toks}
    tok = AutoTokenizer.from_pretrained(out)
    added = {t.content for t in tok.added_tokens_decoder.values()} - {
        t.content for t in AutoTokenizer.from_pretrained(lcrec_model).added_tokens_decoder.values()
    }
    assert added == wanted  # exactly the index's tokens, spelled as the index spells them
    item, tokens = next(iter(index.items()))
    assert (
        tok.convert_ids_to_tokens(tok("".join(tokens), add_special_tokens=False)["input_ids"])
        == tokens
    )

    source = json.loads((out / SOURCE_FILENAME).read_text())
    assert source["sids"] == str(lcrec.index.resolve())
    assert source["codebooks"] == str(lcrec.codebooks.resolve())
    assert source["new_tokens"] == len(wanted)
    printed = res.output.splitlines()
    assert re.match(
        r"probe before: exact match \d\.\d{3} \(free 0\.000\) on 64 held-out items; RSA a",
        printed[0],
    ), printed[0]
    assert printed[1].startswith("probe after:")
    assert printed[-1] == str(out)
    checks = json.loads((out / CHECKS_FILENAME).read_text())
    assert checks["probe"]["after"]["items"] == 64
    assert set(checks["probe"]["after"]["rsa"]) == {"a", "b", "c", "d"}
    assert (out / CHECKS_TEXT_FILENAME).read_text() in res.output
    assert res.output.count("RSA") == 2  # the probe's two lines
    assert all(f"rsa[{lv}]" in res.output for lv in "abcd")  # the gate's four levels

    # What the user runs on it: geodiag reads the framework's own files beside our output.
    gate = runner.invoke(
        geodiag_app,
        ["check", str(out), "--sids", str(lcrec.index), "--codebooks", str(lcrec.codebooks)],
    )
    assert gate.exit_code in (0, 1), gate.output
    # every level of their index measured against their codebooks (named rsa[LEVEL])
    assert all(f"rsa[{lv}]" in gate.output for lv in "abcd"), gate.output
    assert "Not measured" not in gate.output


def test_rows_outside_the_new_tokens_are_the_base_model_s(lcrec, lcrec_model, tmp_path):
    out = tmp_path / "mean"
    assert gti_init(lcrec, lcrec_model, out, "--strategy", "mean", "--holdout", 8).exit_code == 0
    base = load_file(lcrec_model / "model.safetensors")["model.embed_tokens.weight"]
    ours = load_file(out / "model.safetensors")["model.embed_tokens.weight"]
    assert (ours[: len(base)] == base).all()
    np_mean = base.astype("float64").mean(axis=0).astype("float32")
    assert (ours[len(base) :] == np_mean).all()  # mean: every new row the vocabulary mean


def test_too_many_items_without_text_is_exit_2_and_writes_nothing(lcrec, lcrec_model, tmp_path):
    items = json.loads(lcrec.items.read_text())
    for key in list(items)[:200]:  # 200 of 2,016: 10% > the default 5%
        items[key] = {"title": "", "description": ""}
    path = tmp_path / "Toys.item.json"
    path.write_text(json.dumps(items))
    argv = ["init", "--sids", lcrec.index, "--items", path, "--model", lcrec_model]
    res = runner.invoke(app, [*map(str, argv), "-o", str(tmp_path / "out"), "--strategy", "mean"])
    assert res.exit_code == 2
    assert (
        "items of" in res.output
        and "have no text" in res.output
        and "--max-missing-texts" in res.output
    )
    assert not (tmp_path / "out").exists()


def test_an_index_the_readers_refuse_is_exit_2(lcrec, lcrec_model, tmp_path):
    bad = tmp_path / "Toys.index.json"
    bad.write_text(json.dumps({"1": ["<a_1>", "oops"]}))
    argv = ["init", "--sids", bad, "--items", lcrec.items, "--model", lcrec_model]
    res = runner.invoke(app, [*map(str, argv), "-o", str(tmp_path / "out")])
    assert res.exit_code == 2 and "Toys.index.json" in res.output


def test_a_few_items_without_text_are_named_in_a_warning(lcrec, lcrec_model, tmp_path, caplog):
    items = json.loads(lcrec.items.read_text())
    for key in ("3", "5"):
        items[key] = {"title": "", "description": ""}
    path = tmp_path / "Toys.item.json"
    path.write_text(json.dumps(items))
    argv = ["init", "--sids", lcrec.index, "--items", path, "--model", lcrec_model]
    with caplog.at_level("WARNING", logger="gti.dropin.run"):
        res = runner.invoke(
            app,
            [*map(str, argv), "-o", str(tmp_path / "out"), "--strategy", "random", "--holdout", 0],
        )
    assert res.exit_code == 0, res.output
    assert (
        f"2 of {len(lcrec.codes)} items" in caplog.text
        and "have no text" in caplog.text
        and ": 3, 5;" in caplog.text
    )


def rows_and_code_vectors(lcrec, lcrec_model, out, strategy):
    """``strategy`` over the LC-Rec index and its codebooks: each SID token's new row and
    its code vector, token by token (float64)."""
    args = ["--strategy", strategy, "--codebooks", lcrec.codebooks, "--holdout", 8]
    res = gti_init(lcrec, lcrec_model, out, *args)
    assert res.exit_code == 0, res.output
    assert json.loads((out / "init_config.json").read_text())["strategy"] == strategy
    tok = AutoTokenizer.from_pretrained(out)
    weight = load_file(out / "model.safetensors")["model.embed_tokens.weight"].astype("float64")
    tokens = sorted({t for toks in lcrec.token_map().values() for t in toks})
    rows = weight[tok.convert_tokens_to_ids(tokens)]
    vecs = np.array([lcrec.books["abcd".index(t[1])][int(t[3:-1])] for t in tokens])
    return rows, vecs


def test_codebook_projection_carries_their_codebooks(lcrec, lcrec_model, tmp_path):
    """Over a framework's index and codebooks: the new rows' cosines are the codebook
    vectors' (one isometry, a positive scale per level), computed here with numpy."""
    rows, vecs = rows_and_code_vectors(lcrec, lcrec_model, tmp_path / "proj", "codebook-projection")

    def cosines(x):
        unit = x / np.linalg.norm(x, axis=1, keepdims=True)
        return unit @ unit.T

    np.testing.assert_allclose(cosines(rows), cosines(vecs), atol=1e-5)  # float32 rows


def test_codebook_lstsq_maps_their_code_vectors_through_one_affine_map(
    lcrec, lcrec_model, tmp_path
):
    """Over a framework's index and codebooks: every token's row is b + c M for its own code
    vector c, one (b, M) for all (more tokens than parameters per coordinate, so rows of
    any other init would leave a residual), and the rows are not one point."""
    rows, vecs = rows_and_code_vectors(lcrec, lcrec_model, tmp_path / "lstsq", "codebook-lstsq")
    design = np.hstack([np.ones((len(vecs), 1)), vecs])
    assert len(rows) > design.shape[1] + 4
    coef, *_ = np.linalg.lstsq(design, rows, rcond=None)
    scale = np.abs(rows).max()
    np.testing.assert_allclose(design @ coef, rows, atol=1e-6 * scale)  # float32 rows
    assert np.abs(rows - rows.mean(axis=0)).max() > 1e-3 * scale


@pytest.mark.parametrize("strategy", ["full-covariance", "llamafactory-desc", "subword"])
def test_new_strategies_run_over_a_framework_index(lcrec, lcrec_model, tmp_path, strategy):
    out = tmp_path / strategy
    res = gti_init(lcrec, lcrec_model, out, "--strategy", strategy, "--holdout", 8)
    assert res.exit_code == 0, res.output
    assert json.loads((out / "init_config.json").read_text())["strategy"] == strategy
    base = load_file(lcrec_model / "model.safetensors")["model.embed_tokens.weight"]
    new = load_file(out / "model.safetensors")["model.embed_tokens.weight"][len(base) :]
    assert np.isfinite(new).all()
    if strategy == "subword":  # the tiny word-level tokenizer knows no piece of "<a_12>"
        unk = AutoTokenizer.from_pretrained(lcrec_model).unk_token_id
        np.testing.assert_allclose(new, np.broadcast_to(base[unk], new.shape), rtol=1e-6)
    else:
        assert len(np.unique(new.round(6), axis=0)) == len(new)


def test_distillation_grounds_over_a_framework_index(lcrec, lcrec_model, tmp_path):
    out = tmp_path / "distill"
    args = ["--strategy", "gti", "--objective", "ce+distill", "--steps", 2, "--batch-size", 4]
    res = gti_init(lcrec, lcrec_model, out, *args, "--holdout", 8)
    assert res.exit_code == 0, res.output
    config = json.loads((out / "init_config.json").read_text())
    assert config["grounding"]["objective"] == "ce+distill"
    log = [json.loads(x) for x in (out / "train_log.jsonl").read_text().splitlines()]
    steps = [e for e in log if "distill" in e]
    assert len(steps) == 2 and all(e["distill"] > 0 and e["ce"] > 0 for e in steps)
