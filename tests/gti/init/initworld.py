"""A tiny world for the init tests: 12 items with text, 3-level SIDs (4 x 3 x 2 codes),
codebooks, a word-level tokenizer and a 2-layer Llama (gti.models.tiny), all offline."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from tinyworld import TEXTS, make_sids, write_catalog, write_sids_dir
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from geodiag.io.vocabulary.sidecar import SemanticIds
from gti.init.structure import HELD_OUT_TEXT_TO_SID
from gti.models.tiny import build_tiny_tokenizer, tiny_config
from gti.prompts import SID_TO_TEXT, TEXT_TO_SID

# SmolLM2-like: a default system turn, so examples share a long frozen prefix.
CHAT_TEMPLATE = (
    "{% if messages[0]['role'] != 'system' %}<|im_start|>system\nyou are a helpful assistant"
    "<|im_end|>\n{% endif %}{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass
class World:
    root: Path
    sids_dir: Path
    model_dir: Path
    data_spec: str
    sids: SemanticIds
    item_texts: dict[str, str]


def make_tokenizer(chat: bool = False) -> PreTrainedTokenizerFast:
    tok = build_tiny_tokenizer(
        [
            *TEXTS,
            *TEXT_TO_SID,
            *SID_TO_TEXT,
            HELD_OUT_TEXT_TO_SID,
            "user assistant system you are a helpful",
        ]
    )
    if chat:
        tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
        tok.chat_template = CHAT_TEMPLATE
    return tok


def make_model(tok: PreTrainedTokenizerFast, tied: bool = True, seed: int = 0) -> LlamaForCausalLM:
    cfg = tiny_config(tok)
    cfg.tie_word_embeddings = tied
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(cfg)
    return model.eval()


def build_world(root: Path, *, tied: bool = True, chat: bool = False) -> World:
    """Model folder, catalog files and a sids folder as `gti sids build` writes it."""
    root.mkdir(parents=True, exist_ok=True)
    tok = make_tokenizer(chat)
    model_dir = root / "model"
    make_model(tok, tied).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)

    data_spec = write_catalog(root, [f"u{i % 3},m{i},{i}" for i in range(12)])
    sids = make_sids({"stage": "sids", "source_model": str(model_dir), "data": data_spec})
    sids_dir = write_sids_dir(root, sids)
    (sids_dir / "stats.json").write_text("{}")
    texts = {f"m{i}": t for i, t in enumerate(TEXTS)}
    return World(root, sids_dir, model_dir, data_spec, sids, texts)
