"""LC-Rec's RQ-VAE checkpoint (``index/trainer.py``, also LETTER's, MiniOneRec's ``rq/``
and ETEGRec's ``{epoch}.pt.rqvae``): ``torch.save({"args": Namespace, "epoch", "best_loss",
"best_collision_rate", "state_dict", "optimizer"})`` (or the bare state dict), the codebooks
``rq.vq_layers.{i}.embedding.weight`` ``[codes, e_dim]``."""

from __future__ import annotations

from geodiag.io.vocabulary.sids.torch_books import register_state_books

FRAMEWORK = "LC-Rec / LETTER / MiniOneRec / ETEGRec RQ-VAE"
PATTERN = r"^rq\.vq_layers\.(\d+)\.embedding\.weight$"

DIALECT = register_state_books(
    "lcrec.pth",
    FRAMEWORK,
    PATTERN,
    usual_names=("best_collision_model.pth", "best_loss_model.pth", "*.pth", "*.pt.rqvae"),
)
