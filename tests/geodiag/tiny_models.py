"""Tiny transformers causal LMs built from a config (one layer, hidden 16 by default:
milliseconds on a CPU), the word-level tokenizer the tests pair them with, and saving
both as ``save_pretrained`` does.

One builder for every geodiag test that needs a real model: the tests differ only in
vocabulary, hidden size, tie, seed and architecture, so those are the arguments and the
rest of the config is fixed here. The seed is set with ``torch.manual_seed`` right
before the model is built, so a test's numbers depend on (config, seed) alone.

torch and transformers are imported inside the functions: the test modules that use
this one skip themselves (``pytest.importorskip``) before they build anything, and
``callback/trainer_distributed_run.py`` is imported by spawned processes. A unique
module name, like geodiag_fixtures.py (importable from every folder below
tests/geodiag, whose conftest.py puts this folder on sys.path).
"""

from __future__ import annotations

from pathlib import Path

# Architecture -> the prefix of its transformers classes (<Prefix>Config, <Prefix>ForCausalLM).
ARCHITECTURES = {"llama": "Llama", "gemma": "Gemma", "qwen2": "Qwen2"}


def tiny_lm(
    vocab_size: int,
    *,
    hidden_size: int = 16,
    intermediate_size: int = 32,
    num_hidden_layers: int = 1,
    num_attention_heads: int = 2,
    num_key_value_heads: int = 2,
    tied: bool = True,
    seed: int = 0,
    arch: str = "llama",
    **config,
):
    """A freshly initialized ``<arch>ForCausalLM`` with ``vocab_size`` embedding rows of
    ``hidden_size``; ``config``: further config fields (``head_dim``, ``bos_token_id``)."""
    import torch
    import transformers

    prefix = ARCHITECTURES[arch]
    cfg = getattr(transformers, f"{prefix}Config")(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        tie_word_embeddings=tied,
        **config,
    )
    torch.manual_seed(seed)
    return getattr(transformers, f"{prefix}ForCausalLM")(cfg)


def word_tokenizer(n_words: int = 120):
    """A word-level fast tokenizer: ``<unk>`` (id 0), then ``w0`` .. ``w{n_words - 1}``
    (ids 1 ..), split on whitespace. Add tokens to it as a user would (``add_tokens``)."""
    import tokenizers
    import transformers

    vocab = {"<unk>": 0, **{f"w{i}": i + 1 for i in range(n_words)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")


def save(model, path: Path, tokenizer=None, dtype=None) -> Path:
    """``model`` (cast to ``dtype`` first, if given) and ``tokenizer`` saved into ``path``."""
    if dtype is not None:
        model = model.to(dtype)
    model.save_pretrained(path)
    if tokenizer is not None:
        tokenizer.save_pretrained(path)
    return path
