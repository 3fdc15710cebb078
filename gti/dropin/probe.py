"""The held-out grounding probe: greedy text -> SID decoding on items grounding never saw.

For each held-out item the prompt is the first text -> SID template (of ``--templates``)
with the item's text; the model decodes greedily as many tokens as the item's SID has, and
the item counts when every one is the item's own token, in order. Decoded twice:
- constrained (``exact_match``, ``position_accuracy``): each step may only emit a token
  that continues some item's SID of the index (a trie of the index's SIDs, as LC-Rec,
  MiniOneRec and OpenOneRec decode at inference with ``prefix_allowed_tokens_fn``), so
  the probe asks which item the text is, not whether a frozen LM prefers SID tokens
  over words; chance is about one over the number of items;
- free (``exact_match_free``): no constraint, every token of the vocabulary allowed.
Also RSA per level between the new rows and the codebook rows of their codes
(``geodiag.metrics.rsa``), when the index has codebooks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from geodiag.analysis.options import AnalyzeOptions
from geodiag.metrics.rsa import rsa
from geodiag.settings import default_of
from gti.dropin.index import IndexTokens
from gti.prompts import TEXT_TO_SID, render


@dataclass
class ProbeResult:
    items: int  # held-out items decoded
    exact_match: float | None  # share decoded exactly, constrained to the index's SIDs
    position_accuracy: list[float]  # per SID position, constrained
    rsa: dict[str, float | None] = field(default_factory=dict)  # level -> Spearman
    exact_match_free: float | None = None  # share decoded exactly with no constraint

    def line(self) -> str:
        def share(x: float | None) -> str:
            return "n/a" if x is None else f"{x:.3f}"

        levels = ", ".join(
            f"{k} {'undefined' if v is None else f'{v:.3f}'}" for k, v in self.rsa.items()
        )
        return (
            f"exact match {share(self.exact_match)} (free {share(self.exact_match_free)}) "
            f"on {self.items} held-out items" + (f"; RSA {levels}" if levels else "")
        )


def sid_trie(tokenizer: PreTrainedTokenizerBase, index: IndexTokens) -> dict[tuple, list[int]]:
    """Each prefix of some item's SID (as token ids, the empty prefix included) -> the ids
    that continue it in the index, sorted."""
    nxt: dict[tuple, set[int]] = {}
    for tokens in index.items.values():
        ids = tuple(tokenizer.convert_tokens_to_ids(list(tokens)))
        for k in range(len(ids)):
            nxt.setdefault(ids[:k], set()).add(ids[k])
    return {k: sorted(v) for k, v in nxt.items()}


def trie_constraint(
    trie: dict[tuple, list[int]], prompt_len: int, vocab_size: int
) -> Callable[[int, torch.Tensor], list[int]]:
    """``generate``'s ``prefix_allowed_tokens_fn``: the ids that continue the SID decoded so
    far; past a complete SID (an item whose SID is shorter than asked), any id."""

    def allowed(batch_id: int, input_ids: torch.Tensor) -> list[int]:
        prefix = tuple(input_ids[prompt_len:].tolist())
        return trie.get(prefix) or list(range(vocab_size))

    return allowed


@torch.no_grad()
def greedy_sid(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    text: str,
    n_tokens: int,
    ask: str = TEXT_TO_SID[0],
    trie: dict[tuple, list[int]] | None = None,
) -> list[int]:
    """The ``n_tokens`` ids the model emits greedily after the text -> SID prompt ``ask``;
    with ``trie`` (:func:`sid_trie`), only ids that continue one of the index's SIDs."""
    example = render(tokenizer, ask.format(text=text), "", 0)
    device = model.get_input_embeddings().weight.device
    ids = torch.tensor([example.input_ids[: example.answer_start]], device=device)  # (1, T)
    constrained = {}
    if trie is not None:
        constrained["prefix_allowed_tokens_fn"] = trie_constraint(
            trie, ids.shape[1], len(tokenizer)
        )
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=n_tokens,
        min_new_tokens=n_tokens,
        do_sample=False,
        pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id or 0,
        **constrained,
    )
    return out[0, ids.shape[1] :].tolist()


def decode_items(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    index: IndexTokens,
    items: list[str],
    texts: dict[str, str],
    max_text_chars: int,
    ask: str = TEXT_TO_SID[0],
    trie: dict[tuple, list[int]] | None = None,
) -> list[list[int]]:
    """The ids :func:`greedy_sid` decodes for each of ``items``, as many as its SID has."""
    out = []
    for item in items:
        n_tokens = len(index.items[item])
        out.append(greedy_sid(model, tokenizer, texts[item][:max_text_chars], n_tokens, ask, trie))
    return out


def exact_match(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    index: IndexTokens,
    items: list[str],
    texts: dict[str, str],
    max_text_chars: int,
    ask: str = TEXT_TO_SID[0],
    trie: dict[tuple, list[int]] | None = None,
) -> tuple[float | None, list[float]]:
    """(share of ``items`` decoded exactly, accuracy per SID position), decoded as
    :func:`greedy_sid` does with ``trie``."""
    if not items:
        return None, []
    width = max(len(index.items[i]) for i in items)
    hits, right = 0, np.zeros(width)
    decoded = decode_items(model, tokenizer, index, items, texts, max_text_chars, ask, trie)
    for item, got in zip(items, decoded, strict=True):
        target = tokenizer.convert_tokens_to_ids(list(index.items[item]))
        same = [g == t for g, t in zip(got, target, strict=False)]
        right[: len(same)] += same
        hits += all(same) and len(got) == len(target)
    return hits / len(items), (right / len(items)).tolist()


def level_rsa(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, index: IndexTokens
) -> dict[str, float | None]:
    books = index.level_books()
    if not books:
        return {}
    weight = model.get_input_embeddings().weight.detach().float().cpu().numpy()
    token_ids = dict(zip(index.tokens, tokenizer.convert_tokens_to_ids(index.tokens), strict=True))
    out = {}
    for name, ids in index.levels(token_ids).items():
        res = rsa(
            weight[ids],
            books[name],
            n_permutations=0,
            seed=default_of(AnalyzeOptions, "seed"),
            max_items=default_of(AnalyzeOptions, "rsa_max_items"),
        )
        out[name] = res.spearman
    return out


def probe(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    index: IndexTokens,
    items: list[str],
    texts: dict[str, str],
    max_text_chars: int,
    ask: str = TEXT_TO_SID[0],
) -> ProbeResult:
    model.eval()
    trie = sid_trie(tokenizer, index)
    em, per_position = exact_match(model, tokenizer, index, items, texts, max_text_chars, ask, trie)
    free, _ = exact_match(model, tokenizer, index, items, texts, max_text_chars, ask)
    return ProbeResult(
        len(items), em, per_position, level_rsa(model, tokenizer, index), exact_match_free=free
    )
