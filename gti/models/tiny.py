"""Tiny random Llama-family models, for tests and smoke runs.

``tiny_config`` is the architecture (2 layers, hidden 64, 4 heads, MLP 128, tied
embeddings): big enough to exercise every code path of a real Llama (RoPE,
GQA-capable attention, tied head), small enough to build in milliseconds.
``build_tiny_tokenizer`` makes a word-level tokenizer from a corpus so tests need
no download; ``--model tiny`` pairs the same architecture with SmolLM2's tokenizer.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

SPECIAL_TOKENS = ["[UNK]", "[PAD]", "<s>", "</s>"]


def tiny_config(tokenizer: PreTrainedTokenizerBase) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        intermediate_size=128,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def build_tiny_model(tokenizer: PreTrainedTokenizerBase, seed: int = 0) -> LlamaForCausalLM:
    """A random tiny Llama whose vocabulary matches ``tokenizer``; same seed, same weights."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(tiny_config(tokenizer))
    return model.eval()


def build_tiny_tokenizer(corpus: list[str]) -> PreTrainedTokenizerFast:
    """Word-level tokenizer over the lower-cased words and punctuation of ``corpus``.

    Vocabulary order is sorted, so the same corpus always gives the same ids.
    """
    words = sorted({w for text in corpus for w in re.findall(r"\w+|[^\w\s]", text.lower())})
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + words)}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tk.normalizer = normalizers.Lowercase()
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]", bos_token="<s>", eos_token="</s>"
    )


def save_tiny(folder: str | Path, corpus: list[str], seed: int = 0) -> Path:
    """Write a tiny model + tiny tokenizer as a Hugging Face folder (for ``--model PATH``)."""
    folder = Path(folder)
    tokenizer = build_tiny_tokenizer(corpus)
    build_tiny_model(tokenizer, seed).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
