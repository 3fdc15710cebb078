"""OpenOneRec's residual k-means ``model.pt`` (``tokenizer/train_res_kmeans.py``):
``torch.save(model.state_dict())``, the codebooks ``centroids.{i}`` ``[codebook_size, dim]``
(an ``nn.ParameterList``)."""

from __future__ import annotations

from geodiag.io.vocabulary.sids.torch_books import register_state_books

FRAMEWORK = "OpenOneRec"
PATTERN = r"^centroids\.(\d+)$"

DIALECT = register_state_books("openonerec.pt", FRAMEWORK, PATTERN, usual_names=("model.pt",))
