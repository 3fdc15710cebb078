"""OpenOneRec's residual k-means ``model.pt`` (``tokenizer/train_res_kmeans.py``):
``torch.save(model.state_dict())``, the codebooks ``centroids.{i}`` ``[codebook_size, dim]``
(an ``nn.ParameterList``)."""

from __future__ import annotations

import re
from pathlib import Path

from geodiag.io.sids.base import Dialect, SidCodebooks, register_codebooks
from geodiag.io.sids.torch_books import books_from_state, matches

FRAMEWORK = "OpenOneRec"
PATTERN = re.compile(r"^centroids\.(\d+)$")


def read(path: Path) -> SidCodebooks:
    return books_from_state(path, PATTERN, dialect="openonerec.pt", framework=FRAMEWORK)


DIALECT = register_codebooks(
    Dialect(
        "openonerec.pt",
        FRAMEWORK,
        lambda p, h: matches(p, h, PATTERN),
        read,
        usual_names=("model.pt",),
    )
)
