"""gti.deploy: requantizing a GGUF with gguf-py's writer keeps every key and tensor, and
quantizes the 2-D weights exactly as gguf.quants.quantize does; the type list; every
check (modules, build tools) before any download. The converter and the built
llama-quantize themselves run in tests/geodiag/io/formats/test_gguf_llama_cpp.py, when cached."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from geodiag.errors import InputError
from geodiag.io.formats.registry import open_store
from geodiag.io.vocabulary.tokenizer import gguf_tokenizer

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
    tok = gguf_tokenizer(store)
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


def _no_subprocess(monkeypatch) -> None:
    import subprocess

    def ran(*args, **kwargs):
        raise AssertionError(f"ran {args[0]!r} before the checks")

    monkeypatch.setattr(subprocess, "run", ran)
    monkeypatch.setattr(subprocess, "Popen", ran)


def test_type_list_is_one_tuple_of_disjoint_groups(tmp_path, monkeypatch, capsys):
    """--type takes TYPES and nothing else (exit 2 listing them, before any download);
    the help and docs/deployment.md name each."""
    from gti import deploy

    groups = (deploy.CONVERTER_TYPES, deploy.REQUANTIZED_TYPES, deploy.QUANTIZER_TYPES)
    assert deploy.TYPES == sum(groups, ()) and len(set(deploy.TYPES)) == len(deploy.TYPES)
    assert deploy.QUANTIZER_TYPES == ("q4_k_m", "q5_k_m", "q6_k", "q2_k")
    _no_subprocess(monkeypatch)
    rc = deploy.main([str(tmp_path / "ckpt"), str(tmp_path / "o.gguf"), "--type", "Q3_K_S"])
    assert rc == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --type: 'q3_k_s' is not one of {', '.join(deploy.TYPES)}"
    )
    with pytest.raises(SystemExit):
        deploy.main(["--help"])
    assert ", ".join(deploy.TYPES) in " ".join(capsys.readouterr().out.split())
    doc = (Path(__file__).resolve().parents[2] / "docs" / "deployment.md").read_text()
    assert [t for t in deploy.TYPES if t not in doc] == []


@pytest.mark.parametrize("absent", ["cmake", "c++", "ninja+make"])
def test_missing_build_tools_exit_2_before_any_download(tmp_path, monkeypatch, capsys, absent):
    """A K-quant without a cached llama-quantize and without cmake or a compiler: one
    line naming what is missing and what to do, before the sdist or the converter runs."""
    import shutil

    from gti import deploy

    gone = {"c++": {"c++", "g++", "clang++"}, "ninja+make": {"ninja", "make"}}.get(absent, {absent})
    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda n, *a, **k: None if n in gone else real(n, *a, **k))
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    _no_subprocess(monkeypatch)
    args = [str(tmp_path / "ckpt"), str(tmp_path / "o.gguf"), "--type", "q4_k_m"]
    assert deploy.main([*args, "--cache", str(tmp_path / "cache")]) == 2
    what = {"cmake": "cmake", "c++": "a C++ compiler", "ninja+make": "ninja or make"}[absent]
    assert capsys.readouterr().err.strip() == (
        "error: gti.deploy: --type q4_k_m needs llama.cpp's llama-quantize, built once from "
        f"llama-cpp-python==0.3.36's sources with cmake and a C/C++ compiler (missing: {what}): "
        "install them (Debian/Ubuntu: apt-get install cmake g++ ninja-build), or choose a "
        "type that needs no build"
    )
    assert not (tmp_path / "cache").exists() and not (tmp_path / "o.gguf").exists()


def test_a_compiler_named_by_cxx_must_exist(monkeypatch):
    from gti.llama_cpp import missing_build_tools

    monkeypatch.setenv("CXX", "/nonexistent/g++-99 -O2")
    assert "a C++ compiler" in missing_build_tools()


def test_a_cached_quantizer_needs_no_build_tools(tmp_path, monkeypatch):
    """Built once: later K-quant exports find the binary and check no compiler."""
    import shutil

    from gti.llama_cpp import locate_quantizer, quantizer_path

    binary = quantizer_path(tmp_path)
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    monkeypatch.setattr(shutil, "which", lambda *a, **k: None)
    _no_subprocess(monkeypatch)
    assert locate_quantizer(tmp_path) == binary
