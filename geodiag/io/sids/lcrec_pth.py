"""LC-Rec's RQ-VAE checkpoint (``index/trainer.py``, also LETTER's, MiniOneRec's ``rq/``
and ETEGRec's ``{epoch}.pt.rqvae``): ``torch.save({"args": Namespace, "epoch", "best_loss",
"best_collision_rate", "state_dict", "optimizer"})`` (or the bare state dict), the codebooks
``rq.vq_layers.{i}.embedding.weight`` ``[codes, e_dim]``."""

from __future__ import annotations

import re
from pathlib import Path

from geodiag.io.sids.base import Dialect, SidCodebooks, register_codebooks
from geodiag.io.sids.torch_books import books_from_state, matches

FRAMEWORK = "LC-Rec / LETTER / MiniOneRec / ETEGRec RQ-VAE"
PATTERN = re.compile(r"^rq\.vq_layers\.(\d+)\.embedding\.weight$")


def read(path: Path) -> SidCodebooks:
    return books_from_state(path, PATTERN, dialect="lcrec.pth", framework=FRAMEWORK)


DIALECT = register_codebooks(
    Dialect(
        "lcrec.pth",
        FRAMEWORK,
        lambda p, h: matches(p, h, PATTERN),
        read,
        usual_names=("best_collision_model.pth", "best_loss_model.pth", "*.pth", "*.pt.rqvae"),
    )
)
