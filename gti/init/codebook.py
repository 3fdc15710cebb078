"""``codebook-projection``: each SID token starts at its RQ-VAE code vector, carried into
the embedding space by one fixed random isometry.

Q (d, k) has orthonormal columns (QR of a seeded Gaussian), so Q c1 . Q c2 = c1 . c2: the
codebooks' inner products, distances and cross-level structure (residual levels share one
latent space) pass unchanged. Each level is then scaled by one factor so that the median
norm of its rows is the vocabulary's median row norm (``gti.init.norm``): the level's Gram
matrix is the codebook's times that factor squared, and residual levels, whose vectors are
much shorter than level a's, still land at the vocabulary's scale (pblrvo/llm-based-
recommender scales per level too, to the mean norm). The vocabulary mean is not added: a
shared offset would raise every pairwise cosine of the new rows towards 1, the collapse
geodiag's gate measures. A new token with no code vector (a dedup level, which has no
codebook; a framework's marker token) gets a random direction at the median norm.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from geodiag.errors import InputError
from gti.init.context import InitContext
from gti.init.norm import median_norm

if TYPE_CHECKING:
    import torch


def row_codes(context: InitContext, n_new: int) -> list[tuple[int, int] | None]:
    """Each new row's (level, code): the context's, or the sidecar's (level, code) order."""
    if context.row_codes is not None:
        return context.row_codes
    if context.sids is None:
        raise ValueError("codebook-projection needs context.row_codes or context.sids")
    out: list[tuple[int, int] | None] = [
        (li, code) for li, lv in enumerate(context.sids.levels) for code in range(lv.size)
    ]
    return out + [None] * (n_new - len(out))


def isometry(d: int, k: int, generator: torch.Generator) -> torch.Tensor:
    """(d, k) with orthonormal columns, from the QR of a seeded Gaussian, float64."""
    import torch

    q, _ = torch.linalg.qr(torch.randn(d, k, generator=generator, dtype=torch.float64))
    return q


def codebook_projection_init(
    *, old: torch.Tensor, n_new: int, generator: torch.Generator, context: InitContext
) -> torch.Tensor:
    """Rows = the new tokens' code vectors through one isometry, per-level scaled: (n_new, d)."""
    import numpy as np
    import torch

    books = context.codebooks
    if not books:
        raise InputError(
            "--codebooks",
            "codebook-projection needs the RQ-VAE codebooks: the sids folder's "
            "codebooks.safetensors, or --codebooks with --items",
        )
    d = old.shape[1]
    k = max(b.shape[1] for b in books)
    if k > d:
        raise InputError("--codebooks", f"code vectors of dimension {k} do not fit in {d}")
    q = isometry(d, k, generator).numpy()  # (d, k)
    target = median_norm(old)
    codes = row_codes(context, n_new)
    out = np.zeros((n_new, d))
    for level, book in enumerate(books):
        rows = [r for r, c in enumerate(codes) if c is not None and c[0] == level]
        if not rows:
            continue
        vecs = np.asarray(book, dtype=np.float64)[[codes[r][1] for r in rows]]  # (n_l, k_l)
        projected = vecs @ q[:, : vecs.shape[1]].T  # (n_l, d), the same inner products
        scale = target / np.median(np.linalg.norm(vecs, axis=1))
        out[rows] = scale * projected
    loose = [r for r, c in enumerate(codes) if c is None or c[0] >= len(books)]
    if loose:
        z = torch.randn(len(loose), d, generator=generator, dtype=torch.float64).numpy()
        out[loose] = target * z / np.linalg.norm(z, axis=1, keepdims=True)
    return torch.from_numpy(out).to(old.dtype)
