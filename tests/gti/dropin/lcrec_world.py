"""An LC-Rec-format dataset folder, written the way LC-Rec writes one (never copied from it):

- ``{dataset}.index.json``: ``{"<item>": ["<a_12>", "<b_3>", "<c_7>", "<d_1>"], ...}``, item
  keys strings of integers, one token per level (LC-Rec's ``generate_indices.py``).
- ``{dataset}.item.json``: ``{"<item>": {"title", "description", "brand", "categories"}}``.
- ``{dataset}.pth``: the RQ-VAE checkpoint as LC-Rec's trainer saves it: a dict with
  ``args`` (an ``argparse.Namespace``), ``state_dict`` (``rq.vq_layers.{i}.embedding.weight``
  [codes, dim]), ``optimizer``, ``epoch``, ``best_loss``, ``best_collision_rate``.

Planted structure: level ``i``'s code ``c`` has its own word in the item text (a category, a
brand, a material, a series), so text -> SID is learnable, and a group word shared by the
codes ``c // GROUP``, whose codebook vectors cluster around the group's centre: grounding
that learns the pairing carries the codebook's geometry (RSA > 0).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

LEVELS = 4
CODES = 16  # per level (LC-Rec: 256; small so a tiny model grounds in seconds)
DIM = 32
FIELD_WORDS = ("category", "brand", "material", "series")


GROUP = 4  # codes c and c' of one level share a group word (and a codebook cluster) when c // GROUP == c' // GROUP


def code_word(level: int, code: int) -> str:
    return f"{FIELD_WORDS[level][:3]}{code}x"  # e.g. cat12x: one word of the tiny tokenizer


def group_word(level: int, code: int) -> str:
    return f"{FIELD_WORDS[level][:3]}group{code // GROUP}"


@dataclass
class LcRecWorld:
    root: Path
    dataset: str
    codes: np.ndarray  # (n_items, LEVELS)
    books: list[np.ndarray]  # per level (CODES, DIM)

    @property
    def index(self) -> Path:
        return self.root / f"{self.dataset}.index.json"

    @property
    def items(self) -> Path:
        return self.root / f"{self.dataset}.item.json"

    @property
    def codebooks(self) -> Path:
        return self.root / f"{self.dataset}.pth"

    def token_map(self) -> dict[str, tuple[str, ...]]:
        return {
            str(i): tuple(f"<{'abcd'[lv]}_{c}>" for lv, c in enumerate(row))
            for i, row in enumerate(self.codes.tolist())
        }

    def texts(self) -> list[str]:
        data = json.loads(self.items.read_text())
        return [" ".join(str(v) for v in rec.values()) for rec in data.values()]


def write_lcrec(
    root: Path, n_items: int = 2048, seed: int = 0, dataset: str = "Toys"
) -> LcRecWorld:
    import torch

    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    codes = rng.integers(0, CODES, size=(n_items, LEVELS))
    # LC-Rec leaves no two items on one SID (its last level is re-assigned by Sinkhorn).
    _, first = np.unique(codes, axis=0, return_index=True)
    codes = codes[np.sort(first)]
    index = {
        str(i): [f"<{'abcd'[lv]}_{c}>" for lv, c in enumerate(row)]
        for i, row in enumerate(codes.tolist())
    }
    items = {}
    for i, row in enumerate(codes.tolist()):
        cat, brand, material, series = (code_word(lv, c) for lv, c in enumerate(row))
        groups = " ".join(group_word(lv, c) for lv, c in enumerate(row))
        items[str(i)] = {
            "title": f"{series} {material} toy",
            "description": f"A {material} toy of the {series} line, made by {brand}; {groups}.",
            "brand": brand,
            "categories": f"Toys, {cat}",
        }
    (root / f"{dataset}.index.json").write_text(json.dumps(index))
    (root / f"{dataset}.item.json").write_text(json.dumps(items))
    # Codes of one group lie near their group's centre (an RQ-VAE's clusters).
    books = [
        np.repeat(rng.standard_normal((CODES // GROUP, DIM)), GROUP, axis=0)
        + 0.3 * rng.standard_normal((CODES, DIM))
        for _ in range(LEVELS)
    ]
    state = {
        f"rq.vq_layers.{i}.embedding.weight": torch.tensor(b, dtype=torch.float32)
        for i, b in enumerate(books)
    }
    args = argparse.Namespace(
        num_emb_list=[CODES] * LEVELS, e_dim=DIM, ckpt_dir=str(root), epochs=1, lr=1e-3
    )
    torch.save(
        {
            "args": args,
            "epoch": 0,
            "best_loss": 0.1,
            "best_collision_rate": 0.0,
            "state_dict": state,
            "optimizer": {"state": {}, "param_groups": []},
        },
        root / f"{dataset}.pth",
    )
    return LcRecWorld(root, dataset, codes, books)


@dataclass
class OpenOneRecWorld:
    codes_file: Path  # {name}_codes.parquet: pid, codes
    captions: Path  # pid2caption.parquet: pid, dense_caption
    codebooks: Path  # model.pt: centroids.{i}

    def token_map(self, codes: np.ndarray) -> dict[str, tuple[str, ...]]:
        return {
            str(i): tuple(f"<s_{'abcd'[lv]}_{c}>" for lv, c in enumerate(row))
            for i, row in enumerate(codes.tolist())
        }


def write_openonerec(root: Path, world: LcRecWorld) -> OpenOneRecWorld:
    """The same items, SIDs, texts and codebooks as OpenOneRec writes them: its tokenizer's
    ``infer_res_kmeans.py`` saves ``pd.DataFrame({'pid', 'codes'}).to_parquet`` (0-based,
    spelled ``<s_a_12>`` in its vocabulary), its item captions are ``pid2caption.parquet``
    (``pid``, ``dense_caption``) and ``train_res_kmeans.py`` saves the state dict
    (``centroids.{i}``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch

    root.mkdir(parents=True, exist_ok=True)
    pids = list(range(len(world.codes)))
    codes = root / "items_codes.parquet"
    pq.write_table(pa.table({"pid": pids, "codes": world.codes.tolist()}), codes)
    items = json.loads(world.items.read_text())
    captions = [" ".join(str(v) for v in items[str(p)].values()) for p in pids]
    pq.write_table(pa.table({"pid": pids, "dense_caption": captions}), root / "pid2caption.parquet")
    state = {
        f"centroids.{i}": torch.tensor(b, dtype=torch.float32) for i, b in enumerate(world.books)
    }
    torch.save(state, root / "model.pt")
    return OpenOneRecWorld(codes, root / "pid2caption.parquet", root / "model.pt")


if __name__ == "__main__":  # python tests/gti/dropin/lcrec_world.py FOLDER [N_ITEMS]: for bench/
    import sys

    world = write_lcrec(Path(sys.argv[1]), n_items=int(sys.argv[2]) if len(sys.argv) > 2 else 2048)
    print(world.index, world.items, world.codebooks)
