"""RQ-VAE-Recommender's ``checkpoint_{iter}.pt`` (``train_rqvae.py``): ``{"iter", "model":
state_dict, "model_config", "optimizer"}``, the codebooks ``layers.{i}.embedding.weight``.
Its ``model_config`` may pickle the repository's own classes (an enum of the quantizer's
mode): those are refused by name; saving ``{"model": model.state_dict()}`` alone reads."""

from __future__ import annotations

import re
from pathlib import Path

from geodiag.io.sids.base import Dialect, SidCodebooks, register_codebooks
from geodiag.io.sids.torch_books import books_from_state, matches

FRAMEWORK = "RQ-VAE-Recommender"
PATTERN = re.compile(r"^layers\.(\d+)\.embedding\.weight$")


def read(path: Path) -> SidCodebooks:
    return books_from_state(path, PATTERN, dialect="rqvae-recommender.pt", framework=FRAMEWORK)


DIALECT = register_codebooks(
    Dialect(
        "rqvae-recommender.pt",
        FRAMEWORK,
        lambda p, h: matches(p, h, PATTERN),
        read,
        usual_names=("checkpoint_*.pt",),
    )
)
