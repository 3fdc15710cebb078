"""``full-covariance``: new rows drawn from N(mu, Sigma) of the original rows.

Hewitt (2021) proposes it, mergekit's tokensurgeon calls it ``random_matching_distribution``:
each new row looks like a typical row of the vocabulary (its mean, its spread, its
anisotropy), without the collapse of ``mean`` or ``mean-noise`` (N(mu, 1e-9 Sigma)) and
without the isotropy of ``random``. Sigma is the biased covariance (divided by V), as
transformers' ``mean_resizing`` computes it; with V in the tens of thousands the
difference from V - 1 is far below the sampling noise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gti.init.context import InitContext

if TYPE_CHECKING:
    import torch


def vocabulary_gaussian(
    old: torch.Tensor, n_new: int, generator: torch.Generator, scale: float
) -> torch.Tensor:
    """Rows drawn from N(mu, scale * Sigma) of ``old`` (V, d), in float64: (n_new, d).

    Sampled as mu + z L^T with L L^T = scale * Sigma; a singular Sigma (V <= d, or
    duplicated rows) falls back to a symmetric square root from the eigendecomposition.
    """
    import torch

    x = old.double()  # (V, d)
    mu = x.mean(dim=0)  # (d,)
    centered = x - mu
    cov = scale * (centered.T @ centered) / x.shape[0]  # (d, d)
    chol, info = torch.linalg.cholesky_ex(cov)
    if int(info) != 0:
        evals, evecs = torch.linalg.eigh(cov)
        chol = evecs * evals.clamp(min=0).sqrt()  # (d, d), chol chol^T = cov
    z = torch.randn(n_new, x.shape[1], generator=generator, dtype=torch.float64)  # (n_new, d)
    return mu + z @ chol.T


def full_covariance_init(
    *, old: torch.Tensor, n_new: int, generator: torch.Generator, context: InitContext
) -> torch.Tensor:
    """Rows i.i.d. N(mu, Sigma) of the original rows: (n_new, d), dtype of ``old``."""
    return vocabulary_gaussian(old, n_new, generator, 1.0).to(old.dtype)
