"""semantic-ids-llm's RQ-VAE (``src/train_rqvae.py``): ``torch.save({"model_state_dict":
model.state_dict(), "config": config.__dict__})`` (the config holding ``pathlib`` paths),
the codebooks ``vq_layers.{i}.embedding.weight`` ``[codebook_size, codebook_embedding_dim]``."""

from __future__ import annotations

import re
from pathlib import Path

from geodiag.io.sids.base import Dialect, SidCodebooks, register_codebooks
from geodiag.io.sids.torch_books import books_from_state, matches

FRAMEWORK = "semantic-ids-llm"
PATTERN = re.compile(r"^vq_layers\.(\d+)\.embedding\.weight$")


def read(path: Path) -> SidCodebooks:
    return books_from_state(path, PATTERN, dialect="semantic-ids-llm.pth", framework=FRAMEWORK)


DIALECT = register_codebooks(
    Dialect(
        "semantic-ids-llm.pth",
        FRAMEWORK,
        lambda p, h: matches(p, h, PATTERN),
        read,
        usual_names=("*rqvae*.pth", "*rqvae*.pt"),
    )
)
