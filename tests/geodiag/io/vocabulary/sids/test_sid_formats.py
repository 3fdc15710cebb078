"""More framework files read as written, each giving the sidecar route's figures on the same
SIDs: GRID's float32 code tensor (its default writer), semantic-ids-llm's torch.compile'd
``best_model.pth``, TorchEasyRec's SID table (parquet and CSV), MiniOneRec's integer
index; and what is refused, naming the value at fault."""

from __future__ import annotations

import json

import numpy as np
import pytest
import sid_frameworks as fx
from geodiag_fixtures import one_line_exit_2
from test_sid_routes import figures
from typer.testing import CliRunner

from geodiag.cli import app
from geodiag.errors import InputError
from geodiag.io.vocabulary.sids import read_codebooks, read_sid_map

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def metrics(folder, *flags) -> dict:
    res = run("metrics", folder, "--json", *flags)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    out = tmp_path_factory.mktemp("formats")
    fx.write_sidecar(out / "sidecar")
    model = fx.write_model(out / "model", "letter")
    return {
        "want": figures(metrics(out / "sidecar")),
        "model": model,
        "lcrec": fx.write_lcrec(out / "lcrec"),
        "out": out,
    }


def same_as_sidecar(got: dict, want: dict) -> None:
    assert got["rsa"] == pytest.approx(want["rsa"], abs=1e-9)
    assert got["dead"] == want["dead"] and got["collisions"] == want["collisions"]
    assert got["n_items"] == want["n_items"] == fx.N_ITEMS


def test_grids_float32_codes_read_as_integers(env, tmp_path):
    pytest.importorskip("torch")
    path = fx.write_grid_float(tmp_path / "grid")
    m = read_sid_map(path)
    np.testing.assert_array_equal(m.codes, fx.sid_codes())
    assert "float32 floats, all integer-valued" in m.detected[0]
    got = metrics(env["model"], "--sids", path, "--codebooks", env["lcrec"]["codebooks"])
    same_as_sidecar(figures(got), env["want"])


def test_grids_float_tensor_with_a_non_integer_is_refused_naming_it(tmp_path):
    torch = pytest.importorskip("torch")
    codes = torch.tensor(fx.sid_codes(), dtype=torch.float32)
    codes[7, 1] = 3.5
    path = tmp_path / "merged_predictions_tensor.pt"
    torch.save(codes, path)
    with pytest.raises(InputError, match=r"row 7 column 1 holds 3.5, not an integer \(1 such"):
        read_sid_map(path)


def test_semantic_ids_llms_compiled_best_model_reads_its_codebooks(env, tmp_path):
    pytest.importorskip("torch")
    path = fx.write_semantic_ids_llm_best(tmp_path / "rqvae")
    books = read_codebooks(path)
    assert books.framework == "semantic-ids-llm" and len(books.books) == fx.N_LEVELS
    for got, want in zip(books.books, fx.code_books(), strict=True):
        np.testing.assert_array_equal(got, want.astype(np.float64))
    got = metrics(env["model"], "--sids", env["lcrec"]["sids"], "--codebooks", path)
    same_as_sidecar(figures(got), env["want"])


@pytest.mark.parametrize("kind", ["parquet", "csv"])
def test_torcheasyrecs_sid_table(env, tmp_path, kind):
    pytest.importorskip("pyarrow")
    path = fx.write_torcheasyrec(tmp_path / "sid_output")[kind]
    m = read_sid_map(path)
    assert m.framework == "TorchEasyRec" and m.items[:2] == ["5000", "5001"]
    np.testing.assert_array_equal(m.codes, fx.sid_codes())
    got = metrics(env["model"], "--sids", path, "--codebooks", env["lcrec"]["codebooks"])
    same_as_sidecar(figures(got), env["want"])


def test_torcheasyrec_csv_with_bad_codes_names_the_item(tmp_path):
    path = tmp_path / "part-0.csv"
    path.write_text('"codes","item_id"\n"1,2,3",10\n"4,x,6",11\n')
    with pytest.raises(InputError, match=r"item '11': codes '4,x,6' are not comma-delimited"):
        read_sid_map(path)
    path.write_text('"codes","item_id"\n"1,2,3",10\n"4,6",11\n')
    with pytest.raises(InputError, match="item '11': 2 codes where items hold 3"):
        read_sid_map(path)


def test_minionerecs_integer_index_gives_the_sidecar_figures(env, tmp_path):
    path = tmp_path / "Games.faiss-rq.index.json"
    with open(path, "w") as f:  # save_indices_json(codes, path, use_prefix=False)
        json.dump({i: [int(c) for c in r] for i, r in enumerate(fx.sid_codes())}, f, indent=2)
    got = metrics(env["model"], "--sids", path, "--codebooks", env["lcrec"]["codebooks"])
    same_as_sidecar(figures(got), env["want"])


def test_a_bom_index_gives_the_sidecar_figures_through_the_cli(env, tmp_path):
    path = tmp_path / "Games.index.json"
    path.write_bytes(b"\xef\xbb\xbf" + env["lcrec"]["sids"].read_bytes())
    got = metrics(env["model"], "--sids", path, "--codebooks", env["lcrec"]["codebooks"])
    same_as_sidecar(figures(got), env["want"])
    # and a UTF-16 one is refused by cause, exit 2
    wide = tmp_path / "wide.index.json"
    wide.write_bytes(env["lcrec"]["sids"].read_text().encode("utf-16"))
    assert "UTF-16" in one_line_exit_2(run("check", env["model"], "--sids", wide))
