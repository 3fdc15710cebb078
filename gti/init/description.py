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


def token_means(vecs: torch.Tensor, slots: list[tuple[int, ...]], n_new: int) -> torch.Tensor:
    """Row of each new token = the mean of the vectors (n_items, d) of the items that carry
    it (``slots``: each item's new tokens as row positions); a token no item carries gets
    the mean of all item vectors. (n_new, d) float64."""
    import torch

    flat = torch.tensor([s for item in slots for s in item], dtype=torch.long)  # (sum len,)
    owner = torch.repeat_interleave(torch.arange(len(slots)), torch.tensor([len(s) for s in slots]))
    counts = torch.bincount(flat, minlength=n_new).double()  # (n_new,)
    sums = torch.zeros(n_new, vecs.shape[1], dtype=torch.float64).index_add_(0, flat, vecs[owner])
    means = sums / counts.clamp(min=1)[:, None]
    means[counts == 0] = vecs.mean(dim=0)
    return means


def item_slots(context: InitContext, items: list[str]) -> list[tuple[int, ...]]:
    """Each item's new tokens as row positions: the drop-in route's ``item_slots``, or
    (level offset + code) over ``context.sids``."""
    if context.item_slots is not None:
        return [context.item_slots[i] for i in items]
    sids = context.sids
    if sids is None:
        raise ValueError("context.sids or context.item_slots is needed")
    offsets = [sum(lv.size for lv in sids.levels[:k]) for k in range(len(sids.levels))]
    return [tuple(o + c for o, c in zip(offsets, sids.items[i], strict=True)) for i in items]


def items_with_text(context: InitContext) -> list[str]:
    """The items of the SIDs (or the index) that have a text, in their order."""
    if context.tokenizer is None or (context.sids is None and context.item_slots is None):
        raise ValueError("needs context.tokenizer and context.sids or item_slots")
    known = context.item_slots if context.item_slots is not None else context.sids.items  # type: ignore[union-attr]
    items = [i for i in known if i in context.item_texts]
    if not items:
        raise InputError("--data", "no item of the semantic IDs has a text in the catalog")
    return items


def description_mean_init(
    *, old: torch.Tensor, n_new: int, generator: torch.Generator, context: InitContext
) -> torch.Tensor:
    tok = context.tokenizer
    items = items_with_text(context)
    encoded = tok([context.item_texts[i] for i in items], add_special_tokens=False)["input_ids"]
    # Only original tokens count (an item text could contain a new token's string).
    token_ids = [[t for t in ids if t < old.shape[0]] for ids in encoded]
    empty = [items[k] for k, t in enumerate(token_ids) if not t]
    if empty:
        raise InputError("--data", f"item {empty[0]!r} has a text with no tokens")
    vecs = item_vectors(old, token_ids)  # (n_items, d)
    slots = item_slots(context, items)
    out = token_means(vecs, slots, n_new)  # (n_new, d), (level, code) order for sids
    return out.to(old.dtype)
