"""gti.deploy: requantizing a GGUF with gguf-py's writer keeps every key and tensor, and
quantizes the 2-D weights exactly as gguf.quants.quantize does (the converter itself
runs in tests/geodiag/io/test_gguf_llama_cpp.py, -m slow)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from geodiag.errors import InputError
from geodiag.io.store import open_store

gguf = pytest.importorskip("gguf")


def _f32_gguf(path: Path) -> tuple[Path, np.ndarray]:
    rng = np.random.default_rng(0)
    emb = rng.normal(size=(40, 64)).astype(np.float32)
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_embedding_length(64)
    w.add_token_list([f"t{i}" for i in range(40)])
    w.add_token_types([1] * 38 + [4, 4])
    w.add_tensor("token_embd.weight", emb)
    w.add_tensor("output_norm.weight", np.ones(64, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, emb


@pytest.mark.parametrize("qtype", ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"])
def test_requantize_matches_gguf_quants(tmp_path, qtype):
    from gti.deploy import requantize

    src, emb = _f32_gguf(tmp_path / "f32.gguf")
    dst = requantize(src, tmp_path / "q.gguf", qtype.lower())
    store = open_store(dst)
    t = gguf.GGMLQuantizationType[qtype]
    expected = gguf.quants.dequantize(gguf.quants.quantize(emb, t), t)
    np.testing.assert_array_equal(store.read_rows("token_embd.weight", np.arange(40)), expected)
    assert store.tensors["output_norm.weight"].type_name == "F32"  # 1-D stays F32
    tok = store.tokenizer_info()
    assert [a.id for a in tok.added_non_special()] == [38, 39]
    assert gguf.GGUFReader(dst).get_field("general.file_type").contents() == getattr(
        gguf.LlamaFileType, f"MOSTLY_{qtype}"
    )


def test_kquants_are_not_writable_by_gguf_py(tmp_path):
    from gti.deploy import requantize

    src, _ = _f32_gguf(tmp_path / "f32.gguf")
    with pytest.raises(InputError, match="gguf-py cannot write"):
        requantize(src, tmp_path / "k.gguf", "q4_k")
    assert not (tmp_path / "k.gguf").exists()
    with pytest.raises(InputError, match="unknown ggml type"):
        requantize(src, tmp_path / "x.gguf", "q9_9")


def test_a_missing_converter_dependency_exits_2_before_any_download(tmp_path, monkeypatch, capsys):
    """The issue's fresh-clone failure: the converter fetched for a minute, then died on
    `No module named 'sentencepiece'`. Now the check comes first and names the extra."""
    import importlib.util
    import subprocess

    from gti import deploy

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "sentencepiece" else real(name, *a),
    )

    def no_download(*args, **kwargs):
        raise AssertionError(f"ran {args[0]!r} before checking the converter's modules")

    monkeypatch.setattr(subprocess, "run", no_download)
    rc = deploy.main([str(tmp_path / "ckpt"), str(tmp_path / "out.gguf"), "--type", "q4_0"])
    assert rc == 2
    assert capsys.readouterr().err.strip() == (
        "error: gti.deploy: needs llama.cpp's converter (no module sentencepiece): "
        "pip install 'geodiag[deploy]'"
    )
    assert not (tmp_path / "out.gguf").exists()


def test_the_deploy_extra_installs_what_the_converter_needs():
    """pyproject's deploy extra (with the gti extra it includes) names every module the
    converter check looks for."""
    import re
    import tomllib

    from gti.deploy import CONVERTER_NEEDS

    root = Path(__file__).resolve().parents[2]
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    wanted = {*extras["deploy"], *extras["gti"]}
    names = {re.split(r"[<>=\[ ]", r, maxsplit=1)[0] for r in wanted}
    assert set(CONVERTER_NEEDS) - {"numpy"} <= names  # numpy: a core dependency
    assert "numpy" in {
        re.split(r"[<>=\[ ]", r, maxsplit=1)[0]
        for r in tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    }
