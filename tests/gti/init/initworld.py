"""A tiny world for the init tests: 12 items with text, 3-level SIDs (4 x 3 x 2 codes),
codebooks, a word-level tokenizer and a 2-layer Llama (gti.models.tiny), all offline."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from geodiag.sidecar import Level, SemanticIds, save
from gti.init.templates import SID_TO_TEXT, TEXT_TO_SID
from gti.models.tiny import build_tiny_tokenizer, tiny_config

TEXTS = [
    "Toy Story (1995). Genres: Animation, Children's, Comedy.",
    "GoldenEye (1995). Genres: Action, Adventure, Thriller.",
    "Four Rooms (1995). Genres: Thriller.",
    "Get Shorty (1995). Genres: Action, Comedy, Drama.",
    "Copycat (1995). Genres: Crime, Drama, Thriller.",
    "Twelve Monkeys (1995). Genres: Drama, Sci-Fi.",
    "Babe (1995). Genres: Children's, Comedy, Drama.",
    "Dead Man Walking (1995). Genres: Drama.",
    "Richard III (1995). Genres: Drama, War.",
    "Seven (1995). Genres: Crime, Thriller.",
    "The Usual Suspects (1995). Genres: Crime, Thriller.",
    "Mighty Aphrodite (1995). Genres: Comedy.",
]
LEVELS = (("a", 4), ("b", 3), ("c", 2))
# Unique codes per item; code (a=3) is carried by no item: the fallback case.
CODES = [
    [0, 0, 0], [0, 0, 1], [0, 1, 0], [0, 2, 1],
    [1, 0, 0], [1, 1, 1], [1, 2, 0], [1, 2, 1],
    [2, 0, 0], [2, 0, 1], [2, 1, 0], [2, 2, 1],
]  # fmt: skip
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
        [*TEXTS, *TEXT_TO_SID, *SID_TO_TEXT, "user assistant system you are a helpful"]
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


def make_sids(provenance: dict[str, object] | None = None) -> SemanticIds:
    return SemanticIds(
        base_vocab_size=None,
        levels=[Level(name, size) for name, size in LEVELS],
        items={f"m{i}": list(c) for i, c in enumerate(CODES)},
        provenance=provenance or {},
    )


def build_world(root: Path, *, tied: bool = True, chat: bool = False) -> World:
    """Model folder, catalog files and a sids folder as `gti sids build` writes it."""
    root.mkdir(parents=True, exist_ok=True)
    tok = make_tokenizer(chat)
    model_dir = root / "model"
    make_model(tok, tied).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)

    catalog = root / "catalog.jsonl"
    catalog.write_text(
        "".join(json.dumps({"item_id": f"m{i}", "text": t}) + "\n" for i, t in enumerate(TEXTS))
    )
    inter = root / "inter.csv"
    inter.write_text(
        "user_id,item_id,timestamp\n" + "".join(f"u{i % 3},m{i},{i}\n" for i in range(12))
    )
    data_spec = f"jsonl:{catalog},{inter}"

    sids = make_sids({"stage": "sids", "source_model": str(model_dir), "data": data_spec})
    sids_dir = root / "sids"
    sids_dir.mkdir()
    save(sids, sids_dir / "semantic_ids.json")
    g = torch.Generator().manual_seed(1)
    books = {name: torch.randn(size, 5, generator=g) for name, size in LEVELS}
    save_file(books, sids_dir / "codebooks.safetensors")
    (sids_dir / "stats.json").write_text("{}")
    texts = {f"m{i}": t for i, t in enumerate(TEXTS)}
    return World(root, sids_dir, model_dir, data_spec, sids, texts)
