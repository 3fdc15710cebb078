"""``mean`` (Hewitt 2021) and ``mean-noise`` (transformers' ``mean_resizing``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gti.init.context import InitContext

if TYPE_CHECKING:
    import torch

# transformers' mean_resizing draws from N(mean, 1e-9 * Sigma).
NOISE_SCALE = 1e-9


def mean_init(
    *, old: torch.Tensor, n_new: int, generator: torch.Generator, context: InitContext
) -> torch.Tensor:
    """Every new row = the mean of the original rows, exactly (all rows identical)."""
    mu = old.double().mean(dim=0)  # (d,) in float64: V up to ~1e5 rows
    return mu.to(old.dtype).expand(n_new, -1).clone()  # (n_new, d)


def mean_noise_init(
    *, old: torch.Tensor, n_new: int, generator: torch.Generator, context: InitContext
) -> torch.Tensor:
    """Rows drawn from N(mu, 1e-9 Sigma), Sigma the (biased) covariance of the old rows.

    Same distribution as ``resize_token_embeddings(mean_resizing=True)``, but with an
    explicit generator. Sampled as mu + z L^T with L L^T = 1e-9 Sigma; a singular
    Sigma (V < d, or duplicated rows) falls back to a symmetric square root, where
    transformers would fall back to the plain mean.
    """
    from gti.init.covariance import vocabulary_gaussian

    return vocabulary_gaussian(old, n_new, generator, NOISE_SCALE).to(old.dtype)
