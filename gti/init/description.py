"""``description-mean``: each code's row = the average embedding of the texts of the
items that carry that code. No training; semantics from the backbone's own rows.

For each item: tokenize its text (no special tokens), average the embedding rows
of its tokens -> one vector per item. For each (level, code): average those item
vectors over the items whose SID has that code at that level. A code no item
carries (possible when a codebook is larger than its use) falls back to the mean
of all item vectors, i.e. to a data-dependent version of the ``mean`` init.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from geodiag.errors import InputError
from gti.init.context import InitContext

if TYPE_CHECKING:
    import torch


def item_vectors(old: torch.Tensor, token_ids: list[list[int]]) -> torch.Tensor:
    """Mean row of each item's tokens: (n_items, d), float64."""
    import torch

    x = old.double()
    lengths = torch.tensor([len(t) for t in token_ids], dtype=torch.float64)  # (n_items,)
    flat = torch.tensor([i for t in token_ids for i in t], dtype=torch.long)  # (sum len,)
    owner = torch.repeat_interleave(torch.arange(len(token_ids)), lengths.long())  # (sum len,)
    sums = torch.zeros(len(token_ids), x.shape[1], dtype=torch.float64).index_add_(
        0, owner, x[flat]
    )
    return sums / lengths[:, None]


def description_mean_init(
    *, old: torch.Tensor, n_new: int, generator: torch.Generator, context: InitContext
) -> torch.Tensor:
    import torch

    sids, tok = context.sids, context.tokenizer
    if sids is None or tok is None:
        raise ValueError("description-mean needs context.sids and context.tokenizer")
    items = [i for i in sids.items if i in context.item_texts]
    if not items:
        raise InputError("--data", "no item of the semantic IDs has a text in the catalog")
    encoded = tok([context.item_texts[i] for i in items], add_special_tokens=False)["input_ids"]
    # Only original tokens count (an item text could contain a new token's string).
    token_ids = [[t for t in ids if t < old.shape[0]] for ids in encoded]
    empty = [items[k] for k, t in enumerate(token_ids) if not t]
    if empty:
        raise InputError("--data", f"item {empty[0]!r} has a text with no tokens")
    vecs = item_vectors(old, token_ids)  # (n_items, d)
    fallback = vecs.mean(dim=0)  # (d,)
    codes = torch.tensor([sids.items[i] for i in items], dtype=torch.long)  # (n_items, L)
    rows = []
    for level_index, level in enumerate(sids.levels):
        counts = torch.bincount(codes[:, level_index], minlength=level.size).double()  # (K,)
        sums = torch.zeros(level.size, vecs.shape[1], dtype=torch.float64)
        sums.index_add_(0, codes[:, level_index], vecs)  # (K, d)
        means = sums / counts.clamp(min=1)[:, None]
        means[counts == 0] = fallback
        rows.append(means)
    out = torch.cat(rows)  # (n_new, d), (level, code) order
    if out.shape[0] != n_new:
        raise ValueError(f"sids describe {out.shape[0]} tokens, n_new is {n_new}")
    return out.to(old.dtype)
