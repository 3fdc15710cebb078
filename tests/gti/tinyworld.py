"""What the init and SFT test worlds share: 12 item texts, their 3-level SIDs
(4 x 3 x 2 codes, unique per item; code a=3 is carried by no item), and the
catalog and sids-folder files as `gti data` / `gti sids build` would leave them."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from geodiag.io.vocabulary.sidecar import Level, SemanticIds, save

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
    [0, 0, 0],
    [0, 0, 1],
    [0, 1, 0],
    [0, 2, 1],
    [1, 0, 0],
    [1, 1, 1],
    [1, 2, 0],
    [1, 2, 1],
    [2, 0, 0],
    [2, 0, 1],
    [2, 1, 0],
    [2, 2, 1],
]


def make_sids(provenance: dict[str, object] | None = None) -> SemanticIds:
    return SemanticIds(
        base_vocab_size=None,
        levels=[Level(name, size) for name, size in LEVELS],
        items={f"m{i}": list(c) for i, c in enumerate(CODES)},
        provenance=provenance or {},
    )


def write_catalog(root: Path, interactions: list[str]) -> str:
    """``catalog.jsonl`` of TEXTS (items m0..m11) and ``inter.csv`` with the given
    ``user,item,timestamp`` rows; returns the ``jsonl:CATALOG,INTERACTIONS`` data spec."""
    catalog = root / "catalog.jsonl"
    catalog.write_text(
        "".join(json.dumps({"item_id": f"m{i}", "text": t}) + "\n" for i, t in enumerate(TEXTS))
    )
    inter = root / "inter.csv"
    inter.write_text("user_id,item_id,timestamp\n" + "".join(row + "\n" for row in interactions))
    return f"jsonl:{catalog},{inter}"


def write_sids_dir(root: Path, sids: SemanticIds) -> Path:
    """``root/sids`` with the sidecar and seeded random codebooks (5-dim codes)."""
    sids_dir = root / "sids"
    sids_dir.mkdir()
    save(sids, sids_dir / "semantic_ids.json")
    g = torch.Generator().manual_seed(1)
    books = {name: torch.randn(size, 5, generator=g) for name, size in LEVELS}
    save_file(books, sids_dir / "codebooks.safetensors")
    return sids_dir
