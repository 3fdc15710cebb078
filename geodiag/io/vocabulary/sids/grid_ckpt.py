"""GRID's Lightning checkpoint of its residual quantizer (``.ckpt``): Lightning's dict
(``epoch``, ``global_step``, ``state_dict``, ``loops``, ``callbacks``,
``optimizer_states``, ``hyper_parameters`` ...), the codebooks
``quantization_layer_list.{i}.centroids`` ``[n_clusters, n_features]``."""

from __future__ import annotations

from geodiag.io.vocabulary.sids.torch_books import register_state_books

FRAMEWORK = "GRID"
PATTERN = r"^(?:.*\.)?quantization_layer_list\.(\d+)\.centroids$"

DIALECT = register_state_books("grid.ckpt", FRAMEWORK, PATTERN, usual_names=("*.ckpt",))
