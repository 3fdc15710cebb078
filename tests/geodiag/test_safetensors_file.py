import json
import struct

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file as reference_save
from safetensors.torch import save_file as reference_save_torch

from geodiag.errors import InputError
from geodiag.safetensors_file import SafetensorsFile, bf16_to_float32, float32_to_bf16, save_file


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

    from geodiag import sidecar

    umask = os.umask(0o022)
    try:
        p = save_file({"w": np.ones(2)}, tmp_path / "m.safetensors")
        s = sidecar.save(sidecar.SemanticIds(10, [sidecar.Level("a", 2, [10, 11])], {}), tmp_path)
    finally:
        os.umask(umask)
    for f in (p, s):
        assert stat.S_IMODE(f.stat().st_mode) == 0o644
