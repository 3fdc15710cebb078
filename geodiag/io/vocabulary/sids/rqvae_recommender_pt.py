"""RQ-VAE-Recommender's ``checkpoint_{iter}.pt`` (``train_rqvae.py``): ``{"iter", "model":
state_dict, "model_config", "optimizer"}``, the codebooks ``layers.{i}.embedding.weight``.
Its ``model_config`` may pickle the repository's own classes (an enum of the quantizer's
mode): those are refused by name; saving ``{"model": model.state_dict()}`` alone reads."""

from __future__ import annotations

from geodiag.io.vocabulary.sids.torch_books import register_state_books

FRAMEWORK = "RQ-VAE-Recommender"
PATTERN = r"^layers\.(\d+)\.embedding\.weight$"

DIALECT = register_state_books(
    "rqvae-recommender.pt", FRAMEWORK, PATTERN, usual_names=("checkpoint_*.pt",)
)
