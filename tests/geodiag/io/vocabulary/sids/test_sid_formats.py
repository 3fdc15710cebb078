"""More framework files read as written, each giving the sidecar route's figures on the same
SIDs: GRID's float32 code tensor (its default writer), semantic-ids-llm's torch.compile'd
``best_model.pth``, TorchEasyRec's SID table (parquet and CSV), MiniOneRec's integer
index; and what is refused, naming the value at fault."""

from __future__ import annotations

import json

import numpy as np
import pytest
import sid_frameworks as fx
import sid_frameworks_variants as fv
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
    path = fv.write_grid_float(tmp_path / "grid")
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
    path = fv.write_semantic_ids_llm_best(tmp_path / "rqvae")
    books = read_codebooks(path)
    assert books.framework == "semantic-ids-llm" and len(books.books) == fx.N_LEVELS
    for got, want in zip(books.books, fx.code_books(), strict=True):
        np.testing.assert_array_equal(got, want.astype(np.float64))
    got = metrics(env["model"], "--sids", env["lcrec"]["sids"], "--codebooks", path)
    same_as_sidecar(figures(got), env["want"])


@pytest.mark.parametrize("kind", ["parquet", "csv"])
def test_torcheasyrecs_sid_table(env, tmp_path, kind):
    pytest.importorskip("pyarrow")
    path = fv.write_torcheasyrec(tmp_path / "sid_output")[kind]
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


def test_a_map_of_a_few_items_is_refused_with_the_counts(env, tmp_path):
    """ETEGRec's list dialect takes any list of lists: [[1,2,3],[4,5,6]] is 2 items using
    2 + 2 + 2 codes of the 3 x 16 tokens the model holds: 6 of 48, 12.5% (it was read
    as the whole catalog, and n_untrained counted only the 6 rows it feeds)."""
    from geodiag.io.vocabulary.sid_index import MIN_MAP_COVERAGE

    path = tmp_path / "two.json"
    path.write_text("[[1, 2, 3], [4, 5, 6]]")
    line = one_line_exit_2(run("check", env["model"], "--sids", path, "--sid-offset", "0"))
    assert str(path) in line
    assert "its 2 items use 6 of the 48 SID tokens tokenizer.json holds (12.5%)" in line
    assert f"at least {MIN_MAP_COVERAGE:.0%}" in line and "the 42 it leaves out" in line
    assert "--sids FILE" in line and "semantic_ids.json" in line


def test_the_coverage_rule_at_its_edge(env, tmp_path):
    """The first n items of the LC-Rec index: refused while their distinct codes (counted
    here with numpy) are under MIN_MAP_COVERAGE of the 48 tokens, read (and stated) once not."""
    from geodiag.io.vocabulary.sid_index import MIN_MAP_COVERAGE

    codes = fx.sid_codes()
    index = json.loads(env["lcrec"]["sids"].read_text())

    def used(n: int) -> int:
        return sum(len(np.unique(codes[:n, lv])) for lv in range(fx.N_LEVELS))

    n = next(n for n in range(1, fx.N_ITEMS) if used(n) >= MIN_MAP_COVERAGE * 3 * fx.K)
    for k, ok in ((n - 1, False), (n, True)):
        path = tmp_path / f"first{k}.index.json"
        path.write_text(json.dumps({str(i): index[str(i)] for i in range(k)}))
        flags = ("--sids", path, "--codebooks", env["lcrec"]["codebooks"])
        if ok:
            note = f"its {k} items use {used(k)} of the 48 SID tokens tokenizer.json holds"
            assert any(note in x for x in metrics(env["model"], *flags)["notes"])
        else:
            line = one_line_exit_2(run("check", env["model"], *flags))
            assert f"its {k} items use {used(k)} of the 48 SID tokens" in line


def test_items_naming_tokens_the_tokenizer_lacks_are_counted(env, tmp_path):
    model = fx.write_model(tmp_path / "s_letter", "s_letter")  # spells <s_a_12>
    line = one_line_exit_2(run("check", model, "--sids", env["lcrec"]["sids"]))
    assert f"{fx.N_ITEMS} of its {fx.N_ITEMS} items name SID tokens tokenizer.json lacks" in line
