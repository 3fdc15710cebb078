"""semantic-ids-llm's RQ-VAE (``src/train_rqvae.py``): ``torch.save({"model_state_dict":
model.state_dict(), "config": config.__dict__})`` (the config holding ``pathlib`` paths),
the codebooks ``vq_layers.{i}.embedding.weight`` ``[codebook_size, codebook_embedding_dim]``."""

from __future__ import annotations

from geodiag.io.vocabulary.sids.torch_books import register_state_books

FRAMEWORK = "semantic-ids-llm"
PATTERN = r"^vq_layers\.(\d+)\.embedding\.weight$"

DIALECT = register_state_books(
    "semantic-ids-llm.pth", FRAMEWORK, PATTERN, usual_names=("*rqvae*.pth", "*rqvae*.pt")
)
