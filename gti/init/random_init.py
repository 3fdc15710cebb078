"""``random``: new rows i.i.d. N(0, sigma^2), sigma matched to the original rows."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gti.init.context import InitContext

if TYPE_CHECKING:
    import torch


def random_init(
    *, old: torch.Tensor, n_new: int, generator: torch.Generator, context: InitContext
) -> torch.Tensor:
    """sigma = std of all entries of the original rows, so the new rows have the
    vocabulary's scale (no collapse) but no semantics."""
    import torch

    sigma = old.double().std().item()
    z = torch.randn(n_new, old.shape[1], generator=generator, dtype=torch.float64)
    return (sigma * z).to(old.dtype)  # (n_new, d)
