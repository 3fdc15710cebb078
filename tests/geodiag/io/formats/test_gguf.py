"""GGUF input: files written by llama.cpp's own writer library (gguf-py's GGUFWriter and
gguf.quants.quantize), read by geodiag and compared with gguf-py's own reader and
dequantization; malformed files exit 2 naming the problem. Slow tests run llama.cpp's
converter on tiny transformers models, and read the SmolLM2 GGUF that llama.cpp wrote
against transformers' GGUF loader."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from geodiag_fixtures import BASE_VOCAB, SID_NAMES, base_rows, planted_new_rows, write_gguf
from typer.testing import CliRunner

from geodiag.cli import app
from geodiag.errors import InputError
from geodiag.io.checkpoint import open_checkpoint
from geodiag.io.formats.registry import open_store
from geodiag.io.vocabulary.tokenizer import gguf_tokenizer

gguf = pytest.importorskip("gguf")
Q = gguf.GGMLQuantizationType
ROOT = Path(__file__).resolve().parents[4]
WRITABLE = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1")


def _emb(kind: str = "grounded") -> np.ndarray:
    base = base_rows()
    return np.concatenate([base, planted_new_rows(kind, base)])


def _reference(path: Path, name: str) -> np.ndarray:
    """The whole tensor as gguf-py's reader and dequantizer give it."""
    t = next(t for t in gguf.GGUFReader(path).tensors if t.name == name)
    return gguf.quants.dequantize(t.data, t.tensor_type).reshape(-1, int(t.shape[0]))


@pytest.mark.parametrize("qtype", WRITABLE)
def test_rows_equal_gguf_py_dequantization(tmp_path, qtype):
    path = write_gguf(tmp_path / "m.gguf", _emb(), qtype=qtype)
    store = open_store(path)
    ids = np.array([0, 5, BASE_VOCAB, BASE_VOCAB + 23, BASE_VOCAB + 1], np.int64)
    ref = _reference(path, "token_embd.weight")
    np.testing.assert_array_equal(store.read_rows("token_embd.weight", ids), ref[ids])
    np.testing.assert_array_equal(store.read_block("token_embd.weight", 3, 40, True), ref[3:40])
    assert store.dtype("token_embd.weight") == qtype
    assert store.shape("token_embd.weight") == ref.shape


@pytest.mark.parametrize("qtype", ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "TQ2_0"])
def test_types_gguf_py_only_reads_are_read_the_same(tmp_path, qtype):
    """K-quants and others gguf-py cannot write: random blocks, dequantized both ways."""
    t = Q[qtype]
    block, size = gguf.GGML_QUANT_SIZES[t]
    d, n = 2 * 256, BASE_VOCAB + 24
    rng = np.random.default_rng(0)
    # bytes below 0x3C: every fp16 scale, wherever the type keeps it, is finite
    data = rng.integers(0, 0x3C, size=(n, d // block * size), dtype=np.uint8)
    path = write_gguf(tmp_path / "k.gguf", np.zeros((n, d)), raw={"blk.0.k": (data, t)})
    store = open_store(path)
    ids = np.arange(BASE_VOCAB - 3, n)
    got = store.read_rows("blk.0.k", ids)
    np.testing.assert_array_equal(got, _reference(path, "blk.0.k")[ids])


def test_header_parse_agrees_with_gguf_reader(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", _emb(), qtype="Q4_1", head=_emb("random"))
    store, reader = open_store(path), gguf.GGUFReader(path)
    assert store.names() == [t.name for t in reader.tensors]
    for t in reader.tensors:
        info = store.tensors[t.name]
        assert info.offset == t.data_offset  # gguf-py gives it from the start of the file
        assert info.n_bytes == t.n_bytes and info.type_name == t.tensor_type.name
        assert info.ne == tuple(int(x) for x in t.shape)
    tok = gguf_tokenizer(store)
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    assert [tok.token(i) for i in range(len(tokens))] == tokens
    assert [t.id for t in tok.added_non_special()] == list(range(BASE_VOCAB, BASE_VOCAB + 24))
    assert [t.content for t in tok.added if t.special] == ["<|endoftext|>"]
    np.testing.assert_array_equal(
        store.token_types(), reader.fields["tokenizer.ggml.token_type"].contents()
    )


def test_new_tokens_from_token_types_and_untied_head(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", _emb(), head=_emb("random"), qtype="Q8_0")
    ck = open_checkpoint(path)
    assert ck.new.source == "tokenizer" and ck.new.tokens == SID_NAMES
    assert ck.new.level_names == ["a", "b", "c"] and ck.new.base_vocab_size == BASE_VOCAB
    assert [(m.role, m.tensor, m.dtype) for m in ck.matrices] == [
        ("input", "token_embd.weight", "Q8_0"),
        ("output", "output.weight", "Q8_0"),
    ]
    tied = open_checkpoint(write_gguf(tmp_path / "t.gguf", _emb()))
    assert tied.tied and len(tied.matrices) == 1


def _ckpt_and_gguf(make_ckpt, tmp_path, qtype: str, kind: str = "grounded"):
    ck = make_ckpt(kind, name=kind)
    return ck, write_gguf(tmp_path / f"{kind}-{qtype}.gguf", _emb(kind), qtype=qtype)


def test_check_and_metrics_on_gguf(make_ckpt, tmp_path):
    ck, g = _ckpt_and_gguf(make_ckpt, tmp_path, "Q8_0")
    r = CliRunner().invoke(app, ["metrics", str(g), "--sidecar", str(ck / "semantic_ids.json")])
    assert r.exit_code == 0, r.output
    assert "token_embd.weight  Q8_0" in r.output
    for kind, code in (("grounded", 0), ("mean", 1)):
        _, g = _ckpt_and_gguf(make_ckpt, tmp_path, "F16", kind)
        res = CliRunner().invoke(app, ["check", str(g), "--permutations", "20"])
        assert res.exit_code == code, res.output


def test_drift_checkpoint_to_gguf(make_ckpt, tmp_path):
    ck, g = _ckpt_and_gguf(make_ckpt, tmp_path, "Q4_0")
    r = CliRunner().invoke(app, ["drift", str(ck), str(g), "--permutations", "50", "--json"])
    assert r.exit_code == 0, r.output
    (rep,) = json.loads(r.output)
    q = rep["quantization"]
    assert q["dtype"] == "Q4_0" and set(q["rsa_before"]) == {"a", "b", "c"}  # sidecar of CKPT
    ref = _reference(g, "token_embd.weight")[BASE_VOCAB:].astype(np.float64)
    train = _emb()[BASE_VOCAB:].astype(np.float32).astype(np.float64)  # as the checkpoint stores it
    err = np.linalg.norm(ref - train, axis=1) / np.linalg.norm(train, axis=1)
    np.testing.assert_allclose(q["per_token_relative_error"], err, rtol=1e-12)
    assert q["verdict"].startswith("Q4_0 keeps the structure (RSA a ")
    text = CliRunner().invoke(app, ["drift", str(ck), str(g), "--permutations", "50"]).output
    assert "verdict: Q4_0" in text and "tokens made identical: 0 pair(s)" in text


def test_drift_counts_tokens_made_identical(make_ckpt, tmp_path):
    emb = _emb()
    emb[BASE_VOCAB + 1] = emb[BASE_VOCAB] + 1e-7  # distinct in training, equal after Q8_0
    ck = make_ckpt(emb[BASE_VOCAB:], name="close")
    g = write_gguf(tmp_path / "close.gguf", emb, qtype="Q8_0")
    r = CliRunner().invoke(app, ["drift", str(ck), str(g), "--permutations", "10", "--json"])
    q = json.loads(r.output)[0]["quantization"]
    assert q["identical_pairs"] == 1 and q["identical_examples"] == [["<a_0>", "<a_1>"]]


def _error(path: Path) -> str:
    r = CliRunner().invoke(app, ["metrics", str(path)])
    assert r.exit_code == 2, r.output
    line = r.output.strip().splitlines()[-1]
    assert line.startswith(f"error: {path}: "), line
    return line


def test_malformed_files_exit_2_naming_the_problem(tmp_path):
    good = write_gguf(tmp_path / "good.gguf", _emb(), qtype="Q8_0").read_bytes()
    cases = {
        "magic": b"GGML" + good[4:],
        "truncated": good[: len(good) - 100],
        "header": good[:200],
        "empty": b"",
    }
    i = good.find(b"token_embd.weight") + len("token_embd.weight")
    shape_at = i + 4  # after n_dims: ne[0]
    assert struct.unpack_from("<Q", good, shape_at)[0] == 32
    cases["shape"] = good[:shape_at] + struct.pack("<Q", 48) + good[shape_at + 8 :]
    type_at = shape_at + 16
    cases["type"] = good[:type_at] + struct.pack("<I", 999) + good[type_at + 4 :]
    offset_at = type_at + 4
    cases["offset"] = good[:offset_at] + struct.pack("<Q", 1 << 40) + good[offset_at + 8 :]
    expect = {
        "magic": "bad magic",
        "truncated": "past the end of the file",
        "header": "truncated or corrupt GGUF header",
        "empty": "empty",
        "shape": "not a whole number of Q8_0 blocks",
        "type": "unknown ggml type 999",
        "offset": "past the end of the file",
    }
    for name, data in cases.items():
        p = tmp_path / f"{name}.gguf"
        p.write_bytes(data)
        assert expect[name] in _error(p), name


def test_token_list_that_disagrees_with_the_rows(tmp_path):
    emb = _emb()
    tokens = [f"t{i}" for i in range(len(emb) - 1)]
    p = write_gguf(tmp_path / "m.gguf", emb, tokens=tokens, types=[1] * len(tokens))
    assert "the token list has 323 tokens but 'token_embd.weight' has 324 rows" in _error(p)
    p = write_gguf(tmp_path / "t.gguf", emb, types=[1] * 3)
    assert "token_type has 3 entries but tokenizer.ggml.tokens has 324" in _error(p)


def test_unsupported_type_names_it(tmp_path):
    n, d = BASE_VOCAB + 24, 32
    block, size = gguf.GGML_QUANT_SIZES[Q.Q8_1]
    data = np.zeros((n, d // block * size), np.uint8)
    p = write_gguf(tmp_path / "m.gguf", _emb(), raw={"x.embed_tokens.weight": (data, Q.Q8_1)})
    r = CliRunner().invoke(app, ["metrics", str(p), "--tensor", "x.embed_tokens.weight"])
    assert r.exit_code == 2 and "has type Q8_1, which gguf" in r.output, r.output


def test_missing_gguf_package_says_what_to_install(tmp_path, monkeypatch):
    p = write_gguf(tmp_path / "m.gguf", _emb())
    monkeypatch.setitem(sys.modules, "gguf", None)
    with pytest.raises(InputError, match=r"pip install 'geodiag\[gguf\]'"):
        open_store(p)


def test_reading_safetensors_never_imports_gguf(make_ckpt):
    ck = make_ckpt("random")
    code = (
        "import sys\nfrom typer.testing import CliRunner\nfrom geodiag.cli import app\n"
        f"r = CliRunner().invoke(app, ['check', {str(ck)!r}, '--permutations', '10'])\n"
        "assert r.exit_code == 0, r.output\nprint('gguf' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_report_side_by_side_with_its_gguf(make_ckpt, tmp_path):
    pytest.importorskip("matplotlib")
    ck, g = _ckpt_and_gguf(make_ckpt, tmp_path, "Q4_1")
    out = tmp_path / "r.html"
    args = ["report", str(ck), str(g), "-o", str(out), "--permutations", "20"]
    res = CliRunner().invoke(app, [*args, "--sidecar", str(ck / "semantic_ids.json")])
    assert res.exit_code == 0, res.output
    assert "Q4_1" in out.read_text() and out.with_suffix(".json").is_file()
