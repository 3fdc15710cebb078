"""A SID file is read whole or refused with its cause: cut short by an interrupted copy
(JSON, gzip, parquet, torch.save and .npz zips), in an encoding not read (UTF-16), or not
one JSON object; a UTF-8 byte-order mark and gzip are read through. Each refusal names
the file and where it ends, checked against the cut made by hand."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import sid_frameworks as fx
from geodiag_fixtures import one_line_exit_2
from typer.testing import CliRunner

from geodiag.cli import app
from geodiag.errors import InputError
from geodiag.io.vocabulary.sids import read_codebooks, read_sid_map

# The frameworks' committed files, beside the project (../shared/data; absent in a clone)
SHARED = Path(__file__).resolve().parents[5].parent / "shared" / "data"
runner = CliRunner()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    out = tmp_path_factory.mktemp("cut")
    return {name: writer(out / name) for name, (writer, _, _) in fx.FRAMEWORKS.items()}


def cut(src: Path, dest: Path, n: int) -> Path:
    dest.write_bytes(src.read_bytes()[:n])
    return dest


def test_an_index_cut_between_entries_names_where_it_ends(files, tmp_path):
    text = files["lcrec"]["sids"].read_text()
    at = text.index('"120":')  # json.dump's ', ' before it stays: no closing '}'
    path = cut(files["lcrec"]["sids"], tmp_path / "Games.index.json", at)
    with pytest.raises(InputError) as e:
        read_sid_map(path)
    assert e.value.where == str(path)
    assert f"ends at character {at:,} after item '119' (120 items complete)" in e.value.problem
    assert "before its closing '}'" in e.value.problem and "cut short" in e.value.problem


def test_an_index_cut_inside_an_entry(files, tmp_path):
    text = files["minionerec"]["sids"].read_text()  # indent=2, as MiniOneRec writes it
    at = text.index('"57": [') + 12
    path = cut(files["minionerec"]["sids"], tmp_path / "Games.index.json", at)
    with pytest.raises(
        InputError, match=rf"ends at character {at:,} inside the entry after item '56' \(57 items"
    ):
        read_sid_map(path)


def test_a_real_index_cut_short_is_exit_2_not_fewer_items(tmp_path):
    """GenRec's 16,859-item Games index cut before item 10206 was read as 10,206 items."""
    real = SHARED / "genrec" / "Games.index.json"
    if not real.is_file():
        pytest.skip(f"{real} absent (the shared data of the project's machine)")
    data = real.read_bytes()
    at = data.index(b'"10206":')
    path = cut(real, tmp_path / "Games.index.json", at)
    with pytest.raises(
        InputError, match=r"ends at character 531,991 after item '10205' \(10,206 items complete\)"
    ):
        read_sid_map(path)
    assert at == 531_991 and len(read_sid_map(real).items) == 16_859


@pytest.mark.parametrize(
    ("text", "meaning"),
    [
        ('{"0": ["<a_1>", "<b_2>"] "1": ["<a_2>", "<b_1>"]}', "two entries without a comma"),
        ('{"0": ["<a_1>", "<b_2>"]} {"1": ["<a_2>", "<b_1>"]}', "a second '{'"),
        ('{"0": ["<a_1>", "<b_2>"], "1": ["<a_2>", "<b_1>"],}', "a comma before the closing"),
        ('"0": ["<a_1>", "<b_2>"]}', "does not start with '{'"),
        ('{"0": ["<a_1>", "<b_2>"]}}', "text after the closing"),
    ],
)
def test_an_index_that_is_not_one_json_object_says_why(tmp_path, text, meaning):
    path = tmp_path / "x.index.json"
    path.write_text(text)
    if text.startswith('"'):  # not even recognised as an index: no object at its start
        with pytest.raises(InputError, match="not a SID map geodiag reads"):
            read_sid_map(path)
        return
    with pytest.raises(InputError, match=f"not one JSON object: {meaning}"):
        read_sid_map(path)


def test_a_bom_and_gzip_read_as_the_plain_file(files, tmp_path):
    plain = files["lcrec"]["sids"]
    want = read_sid_map(plain)
    bom = tmp_path / "bom.index.json"
    bom.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())  # as Windows' Notepad saves it
    packed = tmp_path / "Games.index.json.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    code_bom = tmp_path / "12.code.json.gz"
    code_bom.write_bytes(gzip.compress(b"\xef\xbb\xbf" + files["etegrec"]["sids"].read_bytes()))
    for path in (bom, packed):
        got = read_sid_map(path)
        assert got.items == want.items
        np.testing.assert_array_equal(got.codes, want.codes)
    np.testing.assert_array_equal(
        read_sid_map(code_bom).codes, read_sid_map(files["etegrec"]["sids"]).codes
    )


def test_a_gzip_cut_short_and_utf16_are_refused_by_cause(files, tmp_path):
    packed = gzip.compress(files["lcrec"]["sids"].read_bytes())
    path = tmp_path / "Games.index.json.gz"
    path.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(
        InputError, match="a gzip stream that ends before its end marker: cut short"
    ):
        read_sid_map(path)
    wide = tmp_path / "wide.index.json"
    wide.write_bytes(files["lcrec"]["sids"].read_text().encode("utf-16"))
    with pytest.raises(InputError, match="UTF-16 text .*save it as UTF-8"):
        read_sid_map(wide)
    npy = tmp_path / "codes.npy.gz"
    npy.write_bytes(gzip.compress(files["minionerec"]["npy"].read_bytes()))
    with pytest.raises(InputError, match=r"gzip-compressed MiniOneRec \(codes .npy\).*gunzip it"):
        read_sid_map(npy)


def test_ete_grecs_list_cut_short_names_where(files, tmp_path):
    text = files["etegrec"]["sids"].read_text()
    at = len(text) * 2 // 3
    path = cut(files["etegrec"]["sids"], tmp_path / "12.code.json", at)
    with pytest.raises(InputError, match=rf"ends at character {at:,} before its JSON closes"):
        read_sid_map(path)


@pytest.mark.parametrize(
    ("framework", "key", "reader", "what"),
    [
        ("grid", "sids", read_sid_map, "a zip archive (torch.save, .npz)"),
        ("lcrec", "codebooks", read_codebooks, "a zip archive (torch.save, .npz)"),
        ("minionerec", "codebooks", read_codebooks, "a zip archive (torch.save, .npz)"),
        ("openonerec", "sids", read_sid_map, "a parquet file"),
    ],
)
def test_binary_files_cut_short_name_the_file_and_its_end(
    files, tmp_path, framework, key, reader, what
):
    src = files[framework][key]
    n = src.stat().st_size * 2 // 3
    path = cut(src, tmp_path / src.name, n)
    with pytest.raises(InputError) as e:
        reader(path)
    assert e.value.where == str(path)
    assert (
        e.value.problem.startswith(f"{what} that ends at byte {n:,}")
        and "cut short" in e.value.problem
    )


def test_a_corrupt_parquet_page_is_an_input_error_naming_the_file(files, tmp_path):
    pytest.importorskip("pyarrow")
    data = bytearray(files["openonerec"]["sids"].read_bytes())
    data[200:900] = b"U" * 700  # the pages, not the footer
    path = tmp_path / "items_codes.parquet"
    path.write_bytes(bytes(data))
    with pytest.raises(InputError, match="not a readable parquet file"):
        read_sid_map(path)


def test_the_cli_exits_2_on_a_cut_index_and_a_cut_pth(files, tmp_path):
    model = fx.write_model(tmp_path / "model", "letter")
    text = files["lcrec"]["sids"].read_text()
    index = cut(files["lcrec"]["sids"], tmp_path / "Games.index.json", text.index('"120":'))
    line = one_line_exit_2(runner.invoke(app, ["check", str(model), "--sids", str(index)]))
    assert str(index) in line and "(120 items complete)" in line
    pth = files["lcrec"]["codebooks"]
    short = cut(pth, tmp_path / "best_collision_model.pth", pth.stat().st_size - 30)
    res = runner.invoke(
        app, ["check", str(model), "--sids", str(files["lcrec"]["sids"]), "--codebooks", str(short)]
    )
    assert str(short) in one_line_exit_2(res) and "cut short" in res.output


def test_minionerecs_integer_index_reads_the_same_codes(files, tmp_path):
    """``rqkmeans_faiss.py``'s ``save_indices_json(codes, path, use_prefix=False)``:
    ``json.dump({i: [int(c), ...]}, f, indent=2)``, 0-based, no spelling."""
    codes = fx.sid_codes()
    path = tmp_path / "Games.faiss-rq.index.json"
    with open(path, "w") as f:
        json.dump({i: [int(c) for c in row] for i, row in enumerate(codes)}, f, indent=2)
    m = read_sid_map(path)
    np.testing.assert_array_equal(m.codes, codes)
    assert m.spelling is None and m.items[:3] == ["0", "1", "2"]
    assert "use_prefix=False" in m.detected[0]
    bad = tmp_path / "bad.index.json"
    bad.write_text('{"0": [1, 2, 3], "1": [4, 5.5, 6]}')
    with pytest.raises(InputError, match=r"item '1': \[4, 5.5, 6\] is not a list of integer codes"):
        read_sid_map(bad)
    short = tmp_path / "short.index.json"
    short.write_text('{"0": [1, 2, 3], "1": [4, 5]}')
    with pytest.raises(InputError, match="item '1': 2 codes where items hold 3"):
        read_sid_map(short)
    renamed = shutil.copy(path, tmp_path / "x.json")
    assert read_sid_map(renamed).dialect == "index.json"
