"""The input embedding and the output head of every kind of model transformers saves,
found from the files (geodiag.io.formats.tensor_names), not from a list of architectures.

Each model is built by transformers from a tiny config, its vocabulary extended with
``resize_token_embeddings`` (whose new rows start at the vocabulary mean), its new input
rows then set to distinct values (a stand-in for training), and saved by
``save_pretrained``. With the untied head's new rows left at the mean, ``check`` must
fail naming the head; with them set too, it passes.

Before (the name list): Llava and Gemma 3 as transformers 5.24 saves them
(``language_model.lm_head.weight``) passed with the head untrained; Mamba
(``backbone.embeddings.weight``) was refused, exit 2.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from geodiag.cli import app
from geodiag.io.checkpoint import open_checkpoint
from geodiag.io.sources.options import ReadOptions

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from tiny_models import word_tokenizer  # noqa: E402

N_VOCAB, D = 64, 16
NEW_TOKENS = [f"<{level}_{code}>" for level in "ab" for code in range(4)]
TEXT = dict(
    vocab_size=N_VOCAB,
    hidden_size=D,
    intermediate_size=32,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=2,
    tie_word_embeddings=False,
)


def _llava():
    vision = dict(
        model_type="clip_vision_model",
        hidden_size=D,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=8,
        patch_size=4,
    )
    cfg = transformers.LlavaConfig(
        text_config=transformers.LlamaConfig(**TEXT).to_dict(),
        vision_config=vision,
        image_token_index=N_VOCAB - 1,
        tie_word_embeddings=False,
    )
    return transformers.LlavaForConditionalGeneration(cfg)


def _qwen2_vl():
    cfg = transformers.Qwen2VLConfig(
        text_config=dict(**TEXT, rope_scaling={"type": "mrope", "mrope_section": [2, 1, 1]}),
        vision_config=dict(
            depth=1,
            embed_dim=D,
            hidden_size=D,
            num_heads=2,
            mlp_ratio=2,
            patch_size=2,
            spatial_merge_size=1,
            temporal_patch_size=1,
        ),
        image_token_id=N_VOCAB - 1,
        video_token_id=N_VOCAB - 2,
        tie_word_embeddings=False,
    )
    return transformers.Qwen2VLForConditionalGeneration(cfg)


def _gemma3():
    cfg = transformers.Gemma3Config(
        text_config=dict(**TEXT, head_dim=8),
        vision_config=dict(
            hidden_size=D,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=8,
            patch_size=4,
        ),
        mm_tokens_per_image=4,
        image_token_index=N_VOCAB - 1,
        boi_token_index=N_VOCAB - 3,
        eoi_token_index=N_VOCAB - 2,
        tie_word_embeddings=False,
    )
    return transformers.Gemma3ForConditionalGeneration(cfg)


def _mamba():
    cfg = transformers.MambaConfig(
        vocab_size=N_VOCAB, hidden_size=D, num_hidden_layers=1, state_size=4
    )
    cfg.tie_word_embeddings = False
    return transformers.MambaForCausalLM(cfg)


def _t5():
    return transformers.T5ForConditionalGeneration(
        transformers.T5Config(
            vocab_size=N_VOCAB,
            d_model=D,
            d_kv=8,
            d_ff=32,
            num_layers=1,
            num_heads=2,
            decoder_start_token_id=0,
        )
    )


# name -> (builder, the input embedding's and the head's names as transformers 5.24 saves them)
UNTIED = {
    "llava": (_llava, "language_model.model.embed_tokens.weight", "language_model.lm_head.weight"),
    "qwen2_vl": (_qwen2_vl, "model.embed_tokens.weight", "lm_head.weight"),
    "gemma3": (
        _gemma3,
        "language_model.model.embed_tokens.weight",
        "language_model.lm_head.weight",
    ),
    "mamba": (_mamba, "backbone.embeddings.weight", "lm_head.weight"),
}


def _distinct(w, n: int, seed: int) -> None:
    """Rows n.. of ``w`` set to distinct values at the vocabulary's scale: each a mix of two
    original rows (what training leaves is no mean)."""
    g = torch.Generator().manual_seed(seed)
    k = w.shape[0] - n
    pick = torch.randperm(n, generator=g)[: 2 * k].reshape(k, 2)
    with torch.no_grad():
        w[n:] = 0.8 * w[pick[:, 0]] + 0.6 * w[pick[:, 1]]


def _extended(build, folder, *, head_trained: bool, state_dict: bool = False):
    """``build()`` extended with the new tokens: input rows distinct, the head's new rows
    distinct too or left where resize put them (the mean). ``state_dict``: saved as the
    model's own state dict (transformers 5's names in memory, as 4.52-4.57 saved them)."""
    torch.manual_seed(0)
    model = build()
    tok = word_tokenizer(N_VOCAB - 1)
    tok.add_tokens(NEW_TOKENS)
    model.resize_token_embeddings(len(tok))
    _distinct(model.get_input_embeddings().weight, N_VOCAB, seed=1)
    head = model.get_output_embeddings()
    if head_trained and head.weight is not model.get_input_embeddings().weight:
        _distinct(head.weight, N_VOCAB, seed=2)
    if state_dict:
        from safetensors.torch import save_file

        folder.mkdir()
        tensors = {k: v.contiguous() for k, v in model.state_dict().items()}
        save_file(tensors, folder / "model.safetensors")
        model.config.save_pretrained(folder)
    else:
        model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def check(folder):
    return CliRunner().invoke(app, ["check", str(folder)])


@pytest.mark.parametrize("name", list(UNTIED))
def test_untied_head_at_the_mean_fails_naming_the_head(tmp_path, name):
    build, emb, head = UNTIED[name]
    folder = _extended(build, tmp_path / name, head_trained=False)
    ckpt = open_checkpoint(folder)
    assert [(m.role, m.tensor) for m in ckpt.matrices] == [("input", emb), ("output", head)]
    res = check(folder)
    assert res.exit_code == 1, res.output
    inputs, head_section = res.output.split(f"output head {head}:")
    assert f"input embedding {emb}:" in inputs and "[fail]" not in inputs
    assert "[fail] n_untrained 8 > 0" in head_section


@pytest.mark.parametrize("name", list(UNTIED))
def test_untied_head_trained_passes(tmp_path, name):
    build, emb, head = UNTIED[name]
    res = check(_extended(build, tmp_path / name, head_trained=True))
    assert res.exit_code == 0, res.output
    assert f"output head {head}:" in res.output


@pytest.mark.parametrize("name", ["llava", "gemma3"])
def test_transformers_5_names_in_memory(tmp_path, name):
    """``model.language_model.embed_tokens.weight`` and a top-level ``lm_head.weight``:
    the state dict of a transformers 5 vision-language model (and 4.52-4.57's saves)."""
    build = UNTIED[name][0]
    folder = _extended(build, tmp_path / name, head_trained=False, state_dict=True)
    ckpt = open_checkpoint(folder)
    assert [m.tensor for m in ckpt.matrices] == [
        "model.language_model.embed_tokens.weight",
        "lm_head.weight",
    ]
    res = check(folder)
    assert res.exit_code == 1 and "output head lm_head.weight:" in res.output


def _tied_in_text_config(folder) -> None:
    """config.json as a save from before transformers 5 states a tie: text_config only."""
    cfg = json.loads((folder / "config.json").read_text())
    del cfg["tie_word_embeddings"]
    cfg["text_config"]["tie_word_embeddings"] = True
    (folder / "config.json").write_text(json.dumps(cfg))


def test_text_config_tie_is_read(tmp_path):
    """A tie stated in text_config only, and a stored head that copies the embedding: one
    matrix, as the loader ties it; a stored head with rows of its own is analyzed on its
    own, as transformers 5 loads it (it ties only equal tensors)."""
    torch.manual_seed(0)
    model = _llava()
    with torch.no_grad():
        model.lm_head.weight.copy_(model.get_input_embeddings().weight)
    model.save_pretrained(tmp_path / "copy")
    _tied_in_text_config(tmp_path / "copy")
    ckpt = open_checkpoint(tmp_path / "copy", ReadOptions(new_tokens=(56, 64)))
    assert ckpt.tied and [m.role for m in ckpt.matrices] == ["input"]
    assert ckpt.head.stored == "language_model.lm_head.weight"

    folder = _extended(_llava, tmp_path / "own", head_trained=False)
    _tied_in_text_config(folder)
    ckpt = open_checkpoint(folder)
    assert not ckpt.tied and ckpt.matrices[1].tensor == "language_model.lm_head.weight"
    assert check(folder).exit_code == 1


def test_t5_shared_is_the_input_and_the_tied_head(tmp_path):
    folder = _extended(_t5, tmp_path / "t5", head_trained=False)
    ckpt = open_checkpoint(folder)
    assert ckpt.tied and [m.tensor for m in ckpt.matrices] == ["shared.weight"]
    got = ckpt.read_rows(ckpt.matrices[0], ckpt.new.ids)
    assert len(np.unique(got.round(6), axis=0)) == len(NEW_TOKENS)
