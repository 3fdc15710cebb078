"""The vocabulary's row-norm scale, one rule for every place that matches it: the median
row norm of the original rows (NVIDIA Nemotron's tokenizer extension rescales new rows to
it). ``--norm-correct median`` applies it to any strategy's rows; ``codebook-projection``
scales its levels to it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# ``--norm-correct`` values: leave the rows as drawn, or rescale each to the median norm.
NORM_CORRECTIONS = ("none", "median")


def median_norm(old: torch.Tensor) -> float:
    """Median L2 norm of the rows of ``old`` (V, d), in float64 (numpy's median: the mean
    of the two middle values for an even V)."""
    import torch

    return float(torch.quantile(old.double().norm(dim=1), 0.5))


def rescale_rows(rows: torch.Tensor, target: float) -> torch.Tensor:
    """Each row of ``rows`` (n, d) rescaled to norm ``target``; an all-zero row stays zero."""
    x = rows.double()
    norms = x.norm(dim=1, keepdim=True)  # (n, 1)
    scale = (target / norms.clamp(min=1e-300)).where(norms > 0, norms.new_ones(()))
    return (x * scale).to(rows.dtype)


def norm_correct(rows: torch.Tensor, old: torch.Tensor, rule: str) -> torch.Tensor:
    """``rows`` after the ``--norm-correct`` ``rule``, against the original rows ``old``."""
    if rule == "none":
        return rows
    if rule == "median":
        return rescale_rows(rows, median_norm(old))
    raise ValueError(f"unknown norm correction {rule!r}; choose from {', '.join(NORM_CORRECTIONS)}")
