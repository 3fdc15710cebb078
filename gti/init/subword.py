"""``subword``: each new token's row = the mean of the rows of the pieces the *original*
tokenizer splits the token's own string into ("<a_12>" -> "<", "a", "_", "12", ">" in a
BPE vocabulary), as mergekit's tokensurgeon ``subword`` approximation (method ``mean``)
and Unsloth's sub-piece interpolation compute it.

Each matrix averages its own rows (the untied head its head rows, as mergekit does for
``lm_head``). Every piece counts, an unknown-word piece too (it has a row like any other);
a string that gives no piece gets the vocabulary mean where mergekit leaves a zero row.
For SID tokens this mostly encodes the spelling (the level letter, the code's digits):
tokens of one level share most pieces, codes that share digits are close.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gti.init.context import InitContext

if TYPE_CHECKING:
    import torch


def pieces(context: InitContext, n_new: int) -> list[list[int]]:
    """The original tokenizer's ids of each new token's string (no special tokens)."""
    if context.base_tokenizer is None or context.new_tokens is None:
        raise ValueError("subword needs context.base_tokenizer and context.new_tokens")
    if len(context.new_tokens) != n_new:
        raise ValueError(f"{len(context.new_tokens)} new token strings for {n_new} rows")
    encoded = context.base_tokenizer(list(context.new_tokens), add_special_tokens=False)
    return encoded["input_ids"]


def subword_init(
    *, old: torch.Tensor, n_new: int, generator: torch.Generator, context: InitContext
) -> torch.Tensor:
    """Mean row of each new token's original pieces: (n_new, d), dtype of ``old``."""
    import torch

    x = old.double()  # (V, d)
    fallback = x.mean(dim=0)
    rows = [x[torch.tensor(ids)].mean(dim=0) if ids else fallback for ids in pieces(context, n_new)]
    return torch.stack(rows).to(old.dtype)  # (n_new, d)
