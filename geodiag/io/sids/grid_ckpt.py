"""GRID's Lightning checkpoint of its residual quantizer (``.ckpt``): Lightning's dict
(``epoch``, ``global_step``, ``state_dict``, ``loops``, ``callbacks``,
``optimizer_states``, ``hyper_parameters`` ...), the codebooks
``quantization_layer_list.{i}.centroids`` ``[n_clusters, n_features]``."""

from __future__ import annotations

import re
from pathlib import Path

from geodiag.io.sids.base import Dialect, SidCodebooks, register_codebooks
from geodiag.io.sids.torch_books import books_from_state, matches

FRAMEWORK = "GRID"
PATTERN = re.compile(r"^(?:.*\.)?quantization_layer_list\.(\d+)\.centroids$")


def read(path: Path) -> SidCodebooks:
    return books_from_state(path, PATTERN, dialect="grid.ckpt", framework=FRAMEWORK)


DIALECT = register_codebooks(
    Dialect(
        "grid.ckpt",
        FRAMEWORK,
        lambda p, h: matches(p, h, PATTERN),
        read,
        usual_names=("*.ckpt",),
    )
)
