"""Each dialect of geodiag.io.vocabulary.sids recognised by content (whatever the file is called) and
read into the same codes and codebooks; what was detected is stated."""

from __future__ import annotations

import argparse
import importlib.util
import shutil

import numpy as np
import pytest
import sid_frameworks as fx

from geodiag.errors import InputError, MissingExtra
from geodiag.io.vocabulary.sids import read_codebooks, read_sid_map
from geodiag.io.vocabulary.sids.base import SPELLINGS, codes_matrix, is_dedup_digit, parse_token


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    out = tmp_path_factory.mktemp("dialects")
    return {name: writer(out / name) for name, (writer, _, _) in fx.FRAMEWORKS.items()}


@pytest.mark.parametrize("framework", list(fx.FRAMEWORKS))
def test_every_map_and_codebook_reads_the_same_sids_under_any_name(files, framework, tmp_path):
    f = files[framework]
    renamed = tmp_path / "sids.bin"
    shutil.copy(f["sids"], renamed)  # by content, not by name
    m = read_sid_map(renamed)
    codes = fx.sid_codes()
    offset = 1 if framework == "minionerec" else 0
    np.testing.assert_array_equal(m.codes - offset, codes)
    books = read_codebooks(shutil.copy(f["codebooks"], tmp_path / "books.bin"))
    assert len(books.books) == 3
    for got, want in zip(books.books, fx.code_books(), strict=True):
        np.testing.assert_array_equal(got, want.astype(np.float64))


def test_what_each_map_detected(files):
    grid = read_sid_map(files["grid"]["sids"])
    assert "items along the columns" in grid.detected[0]
    np.testing.assert_array_equal(grid.dedup, fx.grid_dedup(fx.sid_codes()))
    ete = read_sid_map(files["etegrec"]["sids"])
    assert any("padding: 1 row(s) of -1 dropped (row(s) [0])" in d for d in ete.detected)
    assert ete.items[0] == "1" and len(ete.items) == fx.N_ITEMS
    mini = read_sid_map(files["minionerec"]["sids"])
    n_colliding = int((fx.grid_dedup(fx.sid_codes()) > 0).sum())
    assert (mini.dedup > 0).sum() == n_colliding and (
        mini.dedup == -1
    ).sum() == fx.N_ITEMS - n_colliding
    assert read_sid_map(files["minionerec"]["npy"]).dedup is None  # a real third level
    assert read_sid_map(files["openonerec"]["sids"]).spelling == SPELLINGS["s_letter"]
    llm = read_sid_map(files["semantic_ids_llm"]["sids"])
    assert llm.items[0] == "B000000000" and llm.dedup is not None


def test_the_dedup_digit_rule():
    codes = np.array([[1, 2], [1, 2], [3, 4], [5, 6]])
    assert is_dedup_digit(codes, np.array([0, 1, 0, 0]))  # a counter within the group
    assert is_dedup_digit(codes, np.array([1, 2, 0, 0]))  # GRID's 1..N
    assert not is_dedup_digit(codes, np.array([0, 0, 1, 2]))  # leaves a collision
    assert not is_dedup_digit(codes, np.array([7, 9, 4, 2]))  # ranges like a codebook level


def test_a_square_matrix_cannot_be_oriented(tmp_path):
    with pytest.raises(InputError, match="cannot tell items from levels"):
        codes_matrix(tmp_path / "x.npy", np.zeros((3, 3), np.int64), dialect="x", framework="x")


def test_spellings_round_trip():
    assert SPELLINGS["flat"].token(2, 5, 256) == "<|sid_517|>"
    assert parse_token("<s_b_7>") == ("s_letter", 7, 1)
    assert parse_token("<c_12>") == ("letter", 12, 2)
    assert parse_token("<|sid_517|>") == ("flat", 517, None)


def test_letter_args_with_paths_and_rqvae_recommender(tmp_path):
    books = read_codebooks(fx.write_letter_paths(tmp_path / "letter"))
    assert books.framework.startswith("LC-Rec") and len(books.books) == 3
    rq = read_codebooks(fx.write_rqvae_recommender(tmp_path / "rq"))
    assert rq.framework == "RQ-VAE-Recommender"
    np.testing.assert_array_equal(rq.books[1], fx.code_books()[1])


class QuantizeForwardMode:  # pickled by reference, as RQ-VAE-Recommender's enum would be
    pass


def test_a_pickled_class_is_refused_naming_it_and_what_to_save(tmp_path):
    torch = pytest.importorskip("torch")
    state, _ = fx._rqvae_state("layers.", fx.code_books())
    path = tmp_path / "checkpoint_9.pt"
    torch.save({"iter": 9, "model": state, "model_config": QuantizeForwardMode()}, path)
    with pytest.raises(InputError) as e:
        read_codebooks(path)
    assert "QuantizeForwardMode" in str(e.value) and "state_dict()" in str(e.value)
    ns = tmp_path / "ns.pth"
    torch.save({"args": argparse.Namespace(a=1), "state_dict": state}, ns)
    assert len(read_codebooks(ns).books) == 3  # a Namespace alone is fine


def test_parquet_without_pyarrow_names_the_extra(files, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "pyarrow" else real(name, *a)
    )
    with pytest.raises(MissingExtra, match=r"geodiag\[sids\]"):
        read_sid_map(files["openonerec"]["sids"])


def test_an_unknown_file_names_every_dialect_tried(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"a": 1}')
    with pytest.raises(InputError, match="not a SID map geodiag reads.*GRID.*OpenOneRec"):
        read_sid_map(path)


def test_reading_a_pth_and_parquet_imports_no_torch(files):
    """torch stays off geodiag's read path: LC-Rec's .pth and GRID's .pt are unpickled by
    the restricted unpickler, the parquet by pyarrow alone."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from geodiag.io.vocabulary.sids import read_codebooks, read_sid_map\n"
        f"read_codebooks({str(files['lcrec']['codebooks'])!r})\n"
        f"read_codebooks({str(files['grid']['codebooks'])!r})\n"
        f"read_sid_map({str(files['grid']['sids'])!r})\n"
        f"read_sid_map({str(files['openonerec']['sids'])!r})\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


@pytest.mark.parametrize("framework", ["lcrec", "minionerec", "openonerec", "semantic_ids_llm"])
def test_streaming_blocks_add_up_to_the_map(files, framework, monkeypatch):
    from geodiag.io.vocabulary.sids import index_json, parquet, stream_sid_map

    monkeypatch.setattr(index_json, "BLOCK", 97)  # entries cut at every block boundary
    real = parquet.iter_columns
    monkeypatch.setattr(parquet, "iter_columns", lambda p, n, batch_rows=0: real(p, n, 50))
    path = files[framework]["sids"]
    blocks = list(stream_sid_map(path))
    assert len(blocks) > 3
    whole = read_sid_map(path)
    assert [i for ids, _ in blocks for i in ids] == whole.items
    got = np.concatenate([c for _, c in blocks])
    np.testing.assert_array_equal(got[:, : whole.n_levels], whole.codes)


def test_an_index_with_something_between_entries_is_refused(tmp_path):
    path = tmp_path / "x.index.json"
    path.write_text('{"0": ["<a_1>", "<b_2>"], "oops": 3, "1": ["<a_2>", "<b_1>"]}')
    with pytest.raises(InputError, match="not an item -> token list object at character"):
        read_sid_map(path)
