"""A tiny Llama with SID tokens for the evaluation tests (in memory, offline)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from geodiag.io.vocabulary.sidecar import Level, SemanticIds
from gti.models.tiny import build_tiny_model, build_tiny_tokenizer
from gti.vocab import extend_vocabulary, with_token_ids

WORDS = "the user watched these movies and liked them which one is next".split()
LEVELS = (("a", 4), ("b", 3), ("c", 3))
# 14 items with unique codes; code a=3 and several (a, b) prefixes are carried by no item.
CODES = [
    [0, 0, 0],
    [0, 0, 1],
    [0, 0, 2],
    [0, 1, 0],
    [0, 2, 2],
    [1, 0, 0],
    [1, 1, 1],
    [1, 1, 2],
    [1, 2, 0],
    [2, 0, 1],
    [2, 1, 0],
    [2, 1, 1],
    [2, 1, 2],
    [2, 2, 2],
]


@dataclass
class SidModel:
    model: LlamaForCausalLM
    tokenizer: PreTrainedTokenizerFast
    sids: SemanticIds  # with token ids


def make_sid_model(seed: int = 0, dtype: torch.dtype = torch.float32) -> SidModel:
    tok = build_tiny_tokenizer([" ".join(WORDS)])
    model = build_tiny_model(tok, seed)
    sids = SemanticIds(
        base_vocab_size=None,
        levels=[Level(n, s) for n, s in LEVELS],
        items={f"i{k}": list(c) for k, c in enumerate(CODES)},
    )
    ext = extend_vocabulary(model, tok, sids)
    # Random new rows (not the mean) so that every item gets a distinct score.
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        emb = model.get_input_embeddings().weight
        emb[list(ext.new_token_ids)] = torch.randn(ext.n_new, emb.shape[1], generator=g) * 0.5
    return SidModel(model.to(dtype).eval(), tok, with_token_ids(sids, ext))


def random_prompts(n: int, vocab: int, seed: int = 0) -> list[list[int]]:
    """Prompts of different lengths (so the batch needs left padding); ids from 4 on
    (0-3 are the tokenizer's special tokens)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, 12, (n,), generator=g).tolist()
    return [torch.randint(4, vocab, (m,), generator=g).tolist() for m in lengths]
