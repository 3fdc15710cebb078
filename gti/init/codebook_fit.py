"""``codebook-lstsq``: each SID token starts where a least-squares map from the RQ-VAE code
space to the embedding space puts its code vector.

The map is fitted on the items: an item's quantized latent (the sum of its code vectors
over the levels with a codebook, what the RQ-VAE decodes) against the item's text vector
(the mean input row of its text's tokens, as ``description-mean`` computes it), with an
intercept b: X ~ b + C M, M (k, d). A token's row is b + c M, its code vector alone
through the map. The map is fitted in the direction the init needs (code -> embedding);
where ``codebook-projection`` carries the codebooks' geometry exactly into a random
subspace, this one places it in the subspace where the items' texts vary. Rows are not
rescaled (``--norm-correct median`` does that); residual levels, whose code vectors are
short, land near b, the mean text vector.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from geodiag.errors import InputError
from gti.init.codebook import row_codes
from gti.init.context import InitContext
from gti.init.description import item_slots, item_vectors, items_with_text

if TYPE_CHECKING:
    import torch


def codebook_lstsq_init(
    *, old: torch.Tensor, n_new: int, generator: torch.Generator, context: InitContext
) -> torch.Tensor:
    """b + c M per new token, (b, M) the least-squares fit of item text vectors on item
    latents: (n_new, d). A token with no code vector gets b."""
    import numpy as np
    import torch

    books = context.codebooks
    if not books:
        raise InputError("--codebooks", "codebook-lstsq needs the RQ-VAE codebooks")
    codes = row_codes(context, n_new)
    k = max(b.shape[1] for b in books)

    def code_vector(slot: int) -> np.ndarray:
        c = codes[slot]
        if c is None or c[0] >= len(books):
            return np.zeros(k)
        vec = np.asarray(books[c[0]][c[1]], dtype=np.float64)
        return np.pad(vec, (0, k - len(vec)))

    items = items_with_text(context)
    encoded = context.tokenizer(  # type: ignore[misc]
        [context.item_texts[i] for i in items], add_special_tokens=False
    )["input_ids"]
    keep = [k_ for k_, ids in enumerate(encoded) if any(t < old.shape[0] for t in ids)]
    token_ids = [[t for t in encoded[k_] if t < old.shape[0]] for k_ in keep]
    texts = item_vectors(old, token_ids).numpy()  # (n_items, d)
    slots = item_slots(context, [items[k_] for k_ in keep])
    latents = np.array([sum(code_vector(s) for s in item) for item in slots])  # (n_items, k)
    design = np.hstack([np.ones((len(latents), 1)), latents])  # (n_items, 1 + k)
    coef, *_ = np.linalg.lstsq(design, texts, rcond=None)  # (1 + k, d): b, then M
    rows = coef[0] + np.array([code_vector(s) for s in range(n_new)]) @ coef[1:]
    return torch.from_numpy(rows).to(old.dtype)  # (n_new, d)
