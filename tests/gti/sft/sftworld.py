"""A tiny world for the SFT tests: 12 items with text, 5 users, 3-level SIDs, a
word-level tokenizer and a 2-layer Llama, then `gti init --strategy random` on it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tinyworld import TEXTS, make_sids, write_catalog, write_sids_dir

from gti.init.config import InitConfig
from gti.init.run import run_init
from gti.models.tiny import build_tiny_model, build_tiny_tokenizer
from gti.prompts import NEXT_ITEM, SID_TO_TEXT, TEXT_TO_SID

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

    data_spec = write_catalog(
        root,
        [
            f"u{u},m{item},{1000 * u + t}"
            for u, order in enumerate(ORDERS)
            for t, item in enumerate(order)
        ],
    )
    sids = make_sids({"stage": "sids", "source_model": str(model_dir), "data": data_spec})
    sids_dir = write_sids_dir(root, sids)
    init = run_init(InitConfig(sids=sids_dir, out=root / "init", strategy="random"))
    return World(root, data_spec, init, sids_dir / "codebooks.safetensors")
