"""Encoder-decoder checkpoints written by transformers: T5's ``shared.weight`` (and BART's
``model.shared.weight``) is the input embedding, whatever copies sit beside it.

T5 and tying, in transformers 5.24: ``T5Config`` always sets ``tie_word_embeddings=True``
and keeps the original flag as ``scale_decoder_outputs`` (False for T5 v1.1); on reload a
stored ``lm_head.weight`` that differs from ``shared.weight`` is not tied. So t5-small is
one matrix, and a T5 v1.1 saved with its own head is two. transformers 5 cannot build an
untied T5 from a config, so the v1.1 base is written as the hub's files are (config with
``tie_word_embeddings: false``; shared, encoder/decoder copies and lm_head stored) and then
loaded, extended into its spare rows and saved by transformers itself.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from geodiag.cli import app
from geodiag.io.checkpoint import open_checkpoint

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

N_BASE, N_NEW, D = 56, 8, 16  # tokenizer's base vocabulary, added tokens, d_model
NEW_TOKENS = [f"<{level}_{code}>" for level in "ab" for code in range(N_NEW // 2)]


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def _tokenizer():
    """A Unigram tokenizer (T5's model type) with the SID tokens added, saved by transformers."""
    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
    pieces += [(f"p{i}", -float(i)) for i in range(N_BASE - 3)]
    tok = tokenizers.Tokenizer(tokenizers.models.Unigram(pieces, unk_id=2))
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    )
    fast.add_tokens(NEW_TOKENS)
    assert len(fast) == N_BASE + N_NEW
    return fast


def _t5_config(vocab: int, **kw):
    return transformers.T5Config(
        vocab_size=vocab,
        d_model=D,
        d_kv=8,
        d_ff=32,
        num_layers=1,
        num_heads=2,
        decoder_start_token_id=0,
        **kw,
    )


def _spread_new_rows(*weights) -> None:
    """Stand-in for training: distinct new rows (resize's mean rows would collapse)."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for w in weights:
            w[N_BASE:] = torch.randn(w[N_BASE:].shape, generator=g)


def _rows(folder: Path) -> dict[str, np.ndarray]:
    ckpt = open_checkpoint(folder)
    assert ckpt.new.source == "tokenizer" and ckpt.new.tokens == NEW_TOKENS
    return {m.role: ckpt.read_rows(m, ckpt.new.ids) for m in ckpt.matrices}


def test_t5_small_style_tied(tmp_path):
    """Before: exit 2, no recognizable input embedding."""
    tok = _tokenizer()
    torch.manual_seed(0)
    model = transformers.T5ForConditionalGeneration(_t5_config(N_BASE))
    model.resize_token_embeddings(len(tok))
    _spread_new_rows(model.shared.weight)
    folder = tmp_path / "t5"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    got = _rows(folder)
    assert set(got) == {"input"}  # lm_head is shared.weight: one matrix
    want = model.shared.weight[N_BASE:].double().detach().numpy()
    np.testing.assert_array_equal(got["input"], want)
    ckpt = open_checkpoint(folder)
    assert ckpt.matrices[0].tensor == "shared.weight" and ckpt.tied
    res = run("check", folder, "--permutations", 10)
    assert res.exit_code in (0, 1), res.output
    res = run("metrics", folder, "--json")
    assert res.exit_code == 0, res.output
    assert [m["tensor"] for m in json.loads(res.output)["matrices"]] == ["shared.weight"]


def _hub_v1_1(root: Path) -> Path:
    """A T5 v1.1 folder as the hub has them: untied head, copies of shared stored too, 64
    rows for a 56-token vocabulary (spare rows, as t5's 32128 for 32100 tokens)."""
    from safetensors.torch import save_file

    torch.manual_seed(0)
    model = transformers.T5ForConditionalGeneration(
        _t5_config(N_BASE + N_NEW, feed_forward_proj="gated-gelu")
    )
    model.save_pretrained(root)
    tensors = {k: v.contiguous() for k, v in model.state_dict().items()}
    shared = tensors["shared.weight"]
    tensors["encoder.embed_tokens.weight"] = shared.clone()
    tensors["decoder.embed_tokens.weight"] = shared.clone()
    tensors["lm_head.weight"] = torch.randn(
        shared.shape, generator=torch.Generator().manual_seed(2)
    )
    save_file(tensors, str(root / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((root / "config.json").read_text())
    config["tie_word_embeddings"] = False
    config.pop("scale_decoder_outputs")
    (root / "config.json").write_text(json.dumps(config))
    return root


def test_t5_v1_1_untied_head_is_its_own_matrix(tmp_path):
    """The hub's layout (several *embed_tokens copies: before, exit 2) and what
    transformers 5 saves after adding tokens into the spare rows (config says tied; before,
    the head was skipped as a copy)."""
    hub = _hub_v1_1(tmp_path / "hub")
    _tokenizer().save_pretrained(hub)
    ckpt = open_checkpoint(hub)
    assert [(m.role, m.tensor) for m in ckpt.matrices] == [
        ("input", "shared.weight"),
        ("output", "lm_head.weight"),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.T5ForConditionalGeneration.from_pretrained(hub)
    assert model.lm_head.weight.data_ptr() != model.shared.weight.data_ptr()
    _spread_new_rows(model.shared.weight, model.lm_head.weight)
    folder = tmp_path / "sft"
    model.save_pretrained(folder)
    _tokenizer().save_pretrained(folder)
    saved = json.loads((folder / "config.json").read_text())
    assert saved["tie_word_embeddings"] is True and saved["scale_decoder_outputs"] is False
    got = _rows(folder)
    assert set(got) == {"input", "output"}
    np.testing.assert_array_equal(got["input"], model.shared.weight[N_BASE:].double().detach())
    np.testing.assert_array_equal(got["output"], model.lm_head.weight[N_BASE:].double().detach())
    # transformers itself reloads the head untied: the reference for "two matrices".
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = transformers.T5ForConditionalGeneration.from_pretrained(folder)
    assert again.lm_head.weight.data_ptr() != again.shared.weight.data_ptr()
    res = run("metrics", folder, "--json")
    assert res.exit_code == 0, res.output
    assert [m["role"] for m in json.loads(res.output)["matrices"]] == ["input", "output"]


def test_bart_shared_embedding(tmp_path):
    cfg = transformers.BartConfig(
        vocab_size=N_BASE,
        d_model=D,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        max_position_embeddings=32,
    )
    torch.manual_seed(0)
    model = transformers.BartForConditionalGeneration(cfg)
    tok = _tokenizer()
    model.resize_token_embeddings(len(tok))
    _spread_new_rows(model.model.shared.weight)
    model.save_pretrained(tmp_path / "bart")
    tok.save_pretrained(tmp_path / "bart")
    got = _rows(tmp_path / "bart")
    assert set(got) == {"input"}
    want = model.model.shared.weight[N_BASE:].double().detach().numpy()
    np.testing.assert_array_equal(got["input"], want)


def test_no_token_table_says_what_is_looked_for(tmp_path):
    from geodiag.io.formats.safetensors import save_file

    save_file({"encoder.tok.weight": np.ones((4, 2), np.float32)}, tmp_path / "model.safetensors")
    res = run("metrics", tmp_path, "--new-tokens", "2:4")
    assert res.exit_code == 2
    assert "named like a token table" in res.output and "shared" in res.output
    assert "--tensor NAME" in res.output and "encoder.tok.weight" in res.output
