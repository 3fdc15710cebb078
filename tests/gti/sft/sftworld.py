"""A tiny world for the SFT tests: 12 items with text, 5 users, 3-level SIDs, a
word-level tokenizer and a 2-layer Llama, then `gti init --strategy random` on it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from geodiag.sidecar import Level, SemanticIds, save
from gti.init.config import InitConfig
from gti.init.run import run_init
from gti.init.templates import SID_TO_TEXT, TEXT_TO_SID
from gti.models.tiny import build_tiny_model, build_tiny_tokenizer
from gti.sft.prompts import NEXT_ITEM

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
CODES = [
    [0, 0, 0], [0, 0, 1], [0, 1, 0], [0, 2, 1],
    [1, 0, 0], [1, 1, 1], [1, 2, 0], [1, 2, 1],
    [2, 0, 0], [2, 0, 1], [2, 1, 0], [2, 2, 1],
]  # fmt: skip
# Five users with fixed, overlapping orders: 7 events each -> 4 train examples each.
ORDERS = [
    [0, 1, 2, 3, 4, 5, 6],
    [1, 3, 5, 7, 9, 11, 0],
    [2, 4, 6, 8, 10, 0, 1],
    [11, 10, 9, 8, 7, 6, 5],
    [6, 7, 8, 9, 10, 11, 0],
]


@dataclass
class World:
    root: Path
    data_spec: str
    init: Path  # checkpoint of `gti init --strategy random`
    codebooks: Path


def build_world(root: Path) -> World:
    root.mkdir(parents=True, exist_ok=True)
    corpus = [*TEXTS, *TEXT_TO_SID, *SID_TO_TEXT, NEXT_ITEM]
    tok = build_tiny_tokenizer(corpus)
    model_dir = root / "model"
    build_tiny_model(tok, seed=0).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)

    catalog = root / "catalog.jsonl"
    catalog.write_text(
        "".join(json.dumps({"item_id": f"m{i}", "text": t}) + "\n" for i, t in enumerate(TEXTS))
    )
    inter = root / "inter.csv"
    rows = [
        f"u{u},m{item},{1000 * u + t}"
        for u, order in enumerate(ORDERS)
        for t, item in enumerate(order)
    ]
    inter.write_text("user_id,item_id,timestamp\n" + "\n".join(rows) + "\n")
    data_spec = f"jsonl:{catalog},{inter}"

    sids = SemanticIds(
        base_vocab_size=None,
        levels=[Level(name, size) for name, size in LEVELS],
        items={f"m{i}": list(c) for i, c in enumerate(CODES)},
        provenance={"stage": "sids", "source_model": str(model_dir), "data": data_spec},
    )
    sids_dir = root / "sids"
    sids_dir.mkdir()
    save(sids, sids_dir / "semantic_ids.json")
    g = torch.Generator().manual_seed(1)
    save_file(
        {name: torch.randn(size, 5, generator=g) for name, size in LEVELS},
        sids_dir / "codebooks.safetensors",
    )
    init = run_init(InitConfig(sids=sids_dir, out=root / "init", strategy="random"))
    return World(root, data_spec, init, sids_dir / "codebooks.safetensors")
