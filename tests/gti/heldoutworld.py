"""A tiny world large enough to hold items out of grounding (``--holdout``): 40 items with
text and 3-level SIDs (4 x 4 x 3 codes, unique per item) as a gti sids folder with codebooks
and a catalog, the same SIDs as a MiniOneRec-style index and item file (the drop-in route),
and a 2-layer Llama whose word-level tokenizer covers the texts and the prompt templates.
Forty items so that a tenth (the hold-out cap) is 4 and the probe has at least 2 held-out
items to ask about. Used by the own-SIDs hold-out tests and the grounding-budget bench's
(tools/grounding_budget.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from geodiag.io.vocabulary.sidecar import Level, SemanticIds, save
from gti.init.structure import HELD_OUT_TEXT_TO_SID
from gti.models.tiny import build_tiny_tokenizer, tiny_config
from gti.prompts import SID_TO_TEXT, TEXT_TO_SID

LEVELS = (("a", 4), ("b", 4), ("c", 3))
N_ITEMS = 40


@dataclass
class HeldOutWorld:
    root: Path
    model_dir: Path
    data_spec: str
    sids_dir: Path  # gti's own route
    index: Path  # the drop-in route: index.json and item.json
    items: Path


def codes() -> list[list[int]]:
    """The first N_ITEMS of all 48 code tuples in a fixed shuffled order."""
    every = [[a, b, c] for a in range(4) for b in range(4) for c in range(3)]
    order = torch.randperm(len(every), generator=torch.Generator().manual_seed(3)).tolist()
    return [every[k] for k in order[:N_ITEMS]]


def text(i: int, code: list[int]) -> str:
    a, b, c = code
    return f"Item {i} kind{a} colour{b} size{c}."


def build_heldout_world(root: Path) -> HeldOutWorld:
    from transformers import LlamaForCausalLM

    root.mkdir(parents=True, exist_ok=True)
    rows = codes()
    texts = [text(i, c) for i, c in enumerate(rows)]
    tok = build_tiny_tokenizer([*texts, *TEXT_TO_SID, *SID_TO_TEXT, HELD_OUT_TEXT_TO_SID])
    model_dir = root / "model"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        LlamaForCausalLM(tiny_config(tok)).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)

    catalog, inter = root / "catalog.jsonl", root / "inter.csv"
    catalog.write_text(
        "".join(json.dumps({"item_id": f"m{i}", "text": t}) + "\n" for i, t in enumerate(texts))
    )
    inter.write_text(
        "user_id,item_id,timestamp\n" + "".join(f"u{i % 5},m{i},{i}\n" for i in range(N_ITEMS))
    )
    data = f"jsonl:{catalog},{inter}"
    sids_dir = root / "sids"
    sids_dir.mkdir()
    sids = SemanticIds(
        base_vocab_size=None,
        levels=[Level(name, size) for name, size in LEVELS],
        items={f"m{i}": list(c) for i, c in enumerate(rows)},
        provenance={"stage": "sids", "source_model": str(model_dir), "data": data},
    )
    save(sids, sids_dir / "semantic_ids.json")
    g = torch.Generator().manual_seed(1)
    save_file(
        {name: torch.randn(size, 5, generator=g) for name, size in LEVELS},
        sids_dir / "codebooks.safetensors",
    )

    index, items = root / "Tiny.index.json", root / "Tiny.item.json"
    index.write_text(
        json.dumps(
            {
                str(i): [f"<{n}_{x}>" for (n, _), x in zip(LEVELS, c, strict=True)]
                for i, c in enumerate(rows)
            }
        )
    )
    items.write_text(
        json.dumps({str(i): {"title": t, "description": ""} for i, t in enumerate(texts)})
    )
    return HeldOutWorld(root, model_dir, data, sids_dir, index, items)
