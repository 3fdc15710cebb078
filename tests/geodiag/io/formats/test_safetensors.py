import json
import struct

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file as reference_save
from safetensors.torch import save_file as reference_save_torch

from geodiag.errors import InputError
from geodiag.io.formats.safetensors import (
    SafetensorsFile,
    bf16_to_float32,
    float32_to_bf16,
    save_file,
)


def test_reads_files_written_by_the_reference_library(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 7)).astype(np.float32)
    reference_save(
        {"emb": x, "other": np.arange(6, dtype=np.int64)}, str(tmp_path / "a.safetensors")
    )
    f = SafetensorsFile(tmp_path / "a.safetensors")
    rows = np.array([49, 0, 17])
    np.testing.assert_array_equal(f.read_rows("emb", rows), x[rows].astype(np.float64))
    np.testing.assert_array_equal(f.read_block("emb", 10, 20), x[10:20])
    assert f.read("emb").dtype == np.float64


def test_bf16_matches_torch(tmp_path):
    x = torch.randn(20, 9).to(torch.bfloat16)
    reference_save_torch({"emb": x}, str(tmp_path / "b.safetensors"))
    got = SafetensorsFile(tmp_path / "b.safetensors").read("emb")
    np.testing.assert_array_equal(got, x.to(torch.float64).numpy())


def test_bf16_rounding_matches_torch():
    x = np.random.default_rng(1).normal(size=1000).astype(np.float32)
    ours = bf16_to_float32(float32_to_bf16(x))
    theirs = torch.from_numpy(x).to(torch.bfloat16).to(torch.float32).numpy()
    np.testing.assert_array_equal(ours, theirs)


def test_our_writer_is_read_by_the_reference_library(tmp_path):
    from safetensors.numpy import load_file

    x = np.random.default_rng(2).normal(size=(4, 3))
    save_file({"w": x, "h": x.astype(np.float16)}, tmp_path / "c.safetensors", metadata={"k": "v"})
    loaded = load_file(str(tmp_path / "c.safetensors"))
    np.testing.assert_array_equal(loaded["w"], x)
    np.testing.assert_array_equal(loaded["h"], x.astype(np.float16))


@pytest.fixture
def good_file(tmp_path):
    p = tmp_path / "g.safetensors"
    save_file({"emb": np.ones((100, 8), np.float32)}, p)
    return p


def test_truncated_file_names_the_tensor(good_file):
    data = good_file.read_bytes()
    good_file.write_bytes(data[:-40])
    with pytest.raises(InputError, match="truncated: tensor 'emb'") as e:
        SafetensorsFile(good_file)
    assert str(good_file) in str(e.value)


def test_too_short_and_garbage_headers(tmp_path):
    p = tmp_path / "x.safetensors"
    p.write_bytes(b"abc")
    with pytest.raises(InputError, match="too short"):
        SafetensorsFile(p)
    p.write_bytes(struct.pack("<Q", 10**6) + b"{}")
    with pytest.raises(InputError, match="header claims"):
        SafetensorsFile(p)
    p.write_bytes(struct.pack("<Q", 5) + b"{nope")
    with pytest.raises(InputError, match="not valid JSON"):
        SafetensorsFile(p)


def test_header_that_lies_about_shape(tmp_path):
    header = json.dumps(
        {"emb": {"dtype": "F32", "shape": [10, 8], "data_offsets": [0, 160]}}
    ).encode()
    p = tmp_path / "lie.safetensors"
    p.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 160)
    with pytest.raises(InputError, match="header lies about tensor 'emb'.*needs 320 bytes"):
        SafetensorsFile(p)


def _file_of(path, header: dict, data: bytes):
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + data)
    return path


_ROW = np.arange(4, dtype=np.float32).tobytes()  # 16 bytes


@pytest.mark.parametrize(
    "case, header, data, message",
    [
        (
            "gap",
            {
                "x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                "y": {"dtype": "F32", "shape": [4], "data_offsets": [32, 48]},
            },
            _ROW + b"\0" * 16 + _ROW,
            "tensor 'y' starts at byte 32 of the data buffer, where the bytes before it end at 16",
        ),
        (
            "leading bytes",
            {"x": {"dtype": "F32", "shape": [4], "data_offsets": [16, 32]}},
            b"\0" * 16 + _ROW,
            "tensor 'x' starts at byte 16",
        ),
        (
            "trailing bytes",
            {"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}},
            _ROW + b"\0" * 16,
            "holds 16 bytes after its last tensor",
        ),
    ],
)
def test_buffer_not_tiled_by_tensors_is_refused_as_the_library_does(
    tmp_path, case, header, data, message
):
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    path = _file_of(tmp_path / "x.safetensors", header, data)
    with pytest.raises(SafetensorError):  # the reference refuses the same bytes
        load_file(path)
    with pytest.raises(InputError, match=message) as e:
        SafetensorsFile(path)
    assert str(path) in str(e.value)


def test_empty_tensors_and_no_tensors_are_read_as_the_library_does(tmp_path):
    from safetensors.numpy import load_file

    header = {
        "e": {"dtype": "F32", "shape": [0, 4], "data_offsets": [0, 0]},
        "x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
    }
    path = _file_of(tmp_path / "e.safetensors", header, _ROW)
    assert load_file(path)["e"].shape == (0, 4)
    assert SafetensorsFile(path).info("e").shape == (0, 4)
    empty = _file_of(tmp_path / "none.safetensors", {}, b"")
    assert load_file(empty) == {}
    assert SafetensorsFile(empty).tensors == {}


def test_rows_out_of_range(good_file):
    with pytest.raises(InputError, match=r"row ids \[100\] out of range"):
        SafetensorsFile(good_file).read_rows("emb", np.array([3, 100]))


def test_digest_covers_bytes_read(good_file):
    a, b = SafetensorsFile(good_file), SafetensorsFile(good_file)
    assert a.digest.hexdigest() == b.digest.hexdigest()
    a.read_rows("emb", np.array([1]))
    assert a.digest.hexdigest() != b.digest.hexdigest()


def test_rows_in_any_order_with_repeats_and_runs(tmp_path):
    x = np.random.default_rng(3).normal(size=(64, 5)).astype(np.float32)
    save_file({"emb": x}, tmp_path / "r.safetensors")
    f = SafetensorsFile(tmp_path / "r.safetensors")
    for rows in ([5, 3, 5, 4], [63, 0], list(range(10, 20)) + [2, 40, 41], []):
        got = f.read_rows("emb", np.array(rows, dtype=np.int64))
        np.testing.assert_array_equal(got, x[rows].reshape(len(rows), 5))
    np.testing.assert_array_equal(f.read_block("emb", 60, 100), x[60:])


def test_written_files_are_not_private(tmp_path):
    import os
    import stat

    from geodiag.io.vocabulary import sidecar

    umask = os.umask(0o022)
    try:
        p = save_file({"w": np.ones(2)}, tmp_path / "m.safetensors")
        s = sidecar.save(sidecar.SemanticIds(10, [sidecar.Level("a", 2, [10, 11])], {}), tmp_path)
    finally:
        os.umask(umask)
    for f in (p, s):
        assert stat.S_IMODE(f.stat().st_mode) == 0o644


# ---- issue 21 (5): duplicate names, dtypes geodiag does not read -------------------------


def _raw_file(path, header_text: str, data: bytes) -> None:
    """A file with exactly this header text: duplicate keys cannot pass through a dict."""
    raw = header_text.encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


def test_duplicate_tensor_name_is_rejected_naming_it(tmp_path):
    """Last-one-wins would make the verdict depend on key order (safetensors 0.8 itself
    keeps the last entry), so a name given twice is bad input."""
    p = tmp_path / "dup.safetensors"
    entry = '{"dtype":"F32","shape":[2,2],"data_offsets":[%d,%d]}'
    header = '{"emb":' + entry % (0, 16) + ',"emb":' + entry % (16, 32) + "}"
    _raw_file(p, header, np.arange(8, dtype=np.float32).tobytes())
    with pytest.raises(InputError, match="the name 'emb' appears twice") as e:
        SafetensorsFile(p)
    assert str(p) in str(e.value)


def test_cli_exits_2_on_a_duplicated_embedding_name(make_ckpt):
    """The same bytes, two readings: the first 'model.embed_tokens.weight' entry points at
    a collapsed copy, the second at the healthy rows. Before: last one won, exit 0."""
    from typer.testing import CliRunner

    from geodiag.cli import app

    root = make_ckpt("random")
    path = root / "model.safetensors"
    f = SafetensorsFile(path)
    name = "model.embed_tokens.weight"
    info = f.info(name)
    emb = f.read(name).astype(np.float32)
    collapsed = np.tile(emb.mean(axis=0), (len(emb), 1)).astype(np.float32)
    data = path.read_bytes()[f._data_start :]
    entries = {
        n: {
            "dtype": t.dtype,
            "shape": list(t.shape),
            "data_offsets": [t.begin - f._data_start, t.end - f._data_start],
        }
        for n, t in f.tensors.items()
    }
    fake = {**entries[name], "data_offsets": [len(data), len(data) + info.end - info.begin]}
    header = "{" + f'"{name}":{json.dumps(fake)},'
    header += ",".join(f'"{n}":{json.dumps(e)}' for n, e in entries.items()) + "}"
    _raw_file(path, header, data + collapsed.tobytes())
    res = CliRunner().invoke(app, ["check", str(root), "--permutations", "10"])
    assert res.exit_code == 2, res.output
    assert str(path) in res.output and f"'{name}' appears twice" in res.output


def test_unread_tensors_of_other_dtypes_do_not_reject_the_file(tmp_path):
    """An FP8-quantized layer with its U32/F8_E8M0 side tensors, written by safetensors:
    the F32 embedding is read; the others are only read on request, and then refused."""
    x = torch.randn(12, 4)
    reference_save_torch(
        {
            "emb": x,
            "layer.weight": torch.randn(4, 4).to(torch.float8_e4m3fn),
            "layer.weight_scale": torch.tensor([1, 2, 3], dtype=torch.uint32),
            "layer.scale_e8m0": torch.ones(2, 2).to(torch.float8_e8m0fnu),
            "layer.u64": torch.tensor([7], dtype=torch.uint64),
        },
        str(tmp_path / "q.safetensors"),
    )
    f = SafetensorsFile(tmp_path / "q.safetensors")
    np.testing.assert_array_equal(f.read_rows("emb", np.array([3, 1])), x[[3, 1]].double().numpy())
    for name, dtype in (("layer.weight_scale", "U32"), ("layer.scale_e8m0", "F8_E8M0")):
        with pytest.raises(InputError, match=f"'{name}' has dtype {dtype}, which geodiag cannot"):
            f.read(name)


def test_structure_of_unread_tensors_is_still_checked(tmp_path):
    p = tmp_path / "s.safetensors"
    ok = '"emb":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}'
    data = bytes(32)
    # A dtype the format defines: its size is checked, read or not.
    _raw_file(p, "{" + ok + ',"q":{"dtype":"U32","shape":[3],"data_offsets":[16,32]}}', data)
    with pytest.raises(InputError, match="header lies about tensor 'q'.*needs 12 bytes"):
        SafetensorsFile(p)
    # A dtype newer than geodiag's table: size unknown, offsets still inside the file.
    _raw_file(p, "{" + ok + ',"q":{"dtype":"F2_NEW","shape":[3],"data_offsets":[16,40]}}', data)
    with pytest.raises(InputError, match="truncated: tensor 'q'"):
        SafetensorsFile(p)
    _raw_file(
        p, "{" + ok + ',"q":{"dtype":"F2_NEW","shape":[3],"data_offsets":[16,17]}}', data[:17]
    )
    assert SafetensorsFile(p).info("q").dtype == "F2_NEW"
    # Two tensors claiming the same bytes.
    _raw_file(p, "{" + ok + ',"q":{"dtype":"U8","shape":[4],"data_offsets":[12,16]}}', data)
    with pytest.raises(InputError, match="tensors 'emb' and 'q' overlap"):
        SafetensorsFile(p)
    _raw_file(p, "{" + ok + ',"q":{"dtype":7,"shape":[4],"data_offsets":[16,20]}}', data)
    with pytest.raises(InputError, match="tensor 'q': bad dtype 7"):
        SafetensorsFile(p)


@pytest.mark.parametrize(
    "dtype,name", [(torch.float8_e4m3fn, "F8_E4M3"), (torch.float8_e5m2, "F8_E5M2")]
)
def test_fp8_rows_match_torch(tmp_path, dtype, name):
    """FP8 decoded through ml_dtypes; torch's own float8 -> float64 is the reference."""
    pytest.importorskip("ml_dtypes")
    x = (torch.randn(40, 6) * 3).to(dtype)
    reference_save_torch({"emb": x}, str(tmp_path / "f8.safetensors"))
    f = SafetensorsFile(tmp_path / "f8.safetensors")
    assert f.info("emb").dtype == name
    want = x.to(torch.float64).numpy()
    np.testing.assert_array_equal(f.read("emb"), want)
    rows = np.array([39, 0, 5, 5])
    np.testing.assert_array_equal(f.read_rows("emb", rows), want[rows])
    block = f.read_block("emb", 10, 20, float32=True)
    assert block.dtype == np.float32
    np.testing.assert_array_equal(block, want[10:20])


def test_fp8_without_ml_dtypes_is_bad_input_saying_what_to_install(tmp_path, monkeypatch):
    import sys

    reference_save_torch(
        {"emb": torch.randn(4, 2).to(torch.float8_e4m3fn)}, str(tmp_path / "f8.safetensors")
    )
    f = SafetensorsFile(tmp_path / "f8.safetensors")  # opening needs no ml_dtypes
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # import ml_dtypes -> ImportError
    with pytest.raises(InputError, match="F8_E4M3: reading float8 needs ml_dtypes.*pip install"):
        f.read_rows("emb", np.array([0]))


def _with_tensors(root, extra: dict, embedding_dtype=None) -> None:
    """Rewrite a checkpoint's model.safetensors with safetensors.torch, adding ``extra``."""
    from safetensors.torch import load_file

    path = str(root / "model.safetensors")
    tensors = load_file(path)
    if embedding_dtype is not None:
        name = "model.embed_tokens.weight"
        tensors[name] = tensors[name].to(embedding_dtype)
    reference_save_torch({**tensors, **extra}, path, metadata={"format": "pt"})


def test_checkpoint_with_an_fp8_layer_elsewhere_is_checked(make_ckpt):
    """Before: exit 2 (unsupported dtype 'F8_E4M3' of a layer geodiag never reads)."""
    from typer.testing import CliRunner

    from geodiag.cli import app

    root = make_ckpt("random")
    _with_tensors(
        root,
        {
            "model.layers.0.mlp.down_proj.weight": torch.randn(8, 8).to(torch.float8_e4m3fn),
            "model.layers.0.mlp.down_proj.weight_scale_inv": torch.ones(1, dtype=torch.uint32),
        },
    )
    res = CliRunner().invoke(app, ["check", str(root), "--permutations", "10"])
    assert res.exit_code == 0, res.output


def test_checkpoint_with_an_fp8_embedding(make_ckpt):
    pytest.importorskip("ml_dtypes")
    from safetensors.torch import load_file
    from typer.testing import CliRunner

    from geodiag.cli import app
    from geodiag.io.checkpoint import open_checkpoint

    root = make_ckpt("random")
    _with_tensors(root, {}, embedding_dtype=torch.float8_e4m3fn)
    ckpt = open_checkpoint(root)
    assert ckpt.matrices[0].dtype == "F8_E4M3"
    want = load_file(str(root / "model.safetensors"))["model.embed_tokens.weight"]
    ids = ckpt.new.ids
    got = ckpt.read_rows(ckpt.matrices[0], ids)
    np.testing.assert_array_equal(got, want[torch.from_numpy(ids)].to(torch.float64).numpy())
    res = CliRunner().invoke(app, ["metrics", str(root), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["matrices"][0]["dtype"] == "F8_E4M3"


def test_an_embedding_geodiag_cannot_measure_names_the_dtypes_it_can(make_ckpt):
    from typer.testing import CliRunner

    from geodiag.cli import app

    root = make_ckpt("random")
    _with_tensors(root, {}, embedding_dtype=torch.uint32)
    res = CliRunner().invoke(app, ["metrics", str(root)])
    assert res.exit_code == 2
    assert "has dtype U32; expected F64, F32, F16, BF16, F8_E4M3, F8_E5M2" in res.output


def test_read_rows_in_blocks_matches_one_read_and_digest(tmp_path, monkeypatch):
    """Above _DECODE_ROWS rows are read and decoded a block at a time: same rows, same
    digest of the bytes read."""
    from geodiag.io.formats import safetensors

    x = np.random.default_rng(0).normal(size=(40, 6)).astype(np.float32)
    save_file({"w": x}, tmp_path / "m.safetensors")
    ids = np.array([5, 6, 7, 30, 2, 3, 39, 0, 1, 8, 9, 10, 11])
    one = SafetensorsFile(tmp_path / "m.safetensors")
    whole = one.read_rows("w", ids)
    monkeypatch.setattr(safetensors, "_DECODE_ROWS", 3)
    blocks = SafetensorsFile(tmp_path / "m.safetensors")
    got = blocks.read_rows("w", ids)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, whole)
    np.testing.assert_array_equal(got, x[ids].astype(np.float64))
    assert blocks.digest.hexdigest() == one.digest.hexdigest()
