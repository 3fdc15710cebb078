"""The held-out grounding probe: greedy text -> SID decoding on items grounding never saw.

For each held-out item the prompt is the first text -> SID template (of ``--templates``)
with the item's text;
the model decodes greedily (no constraint) as many tokens as the item's SID has; the item
counts when every one is the item's own token, in order. Also per position (level)
accuracy, and RSA per level between the new rows and the codebook rows of their codes
(``geodiag.metrics.rsa``), when the index has codebooks.
"""

from __future__ import annotations

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
    exact_match: float | None  # share decoded exactly; None: no held-out item
    position_accuracy: list[float]  # per SID position
    rsa: dict[str, float | None] = field(default_factory=dict)  # level -> Spearman

    def line(self) -> str:
        em = "n/a" if self.exact_match is None else f"{self.exact_match:.3f}"
        levels = ", ".join(
            f"{k} {'undefined' if v is None else f'{v:.3f}'}" for k, v in self.rsa.items()
        )
        return f"exact match {em} on {self.items} held-out items" + (
            f"; RSA {levels}" if levels else ""
        )


@torch.no_grad()
def greedy_sid(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    text: str,
    n_tokens: int,
    ask: str = TEXT_TO_SID[0],
) -> list[int]:
    """The ``n_tokens`` ids the model emits greedily after the text -> SID prompt ``ask``."""
    example = render(tokenizer, ask.format(text=text), "", 0)
    device = model.get_input_embeddings().weight.device
    ids = torch.tensor([example.input_ids[: example.answer_start]], device=device)  # (1, T)
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=n_tokens,
        min_new_tokens=n_tokens,
        do_sample=False,
        pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id or 0,
    )
    return out[0, ids.shape[1] :].tolist()


def exact_match(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    index: IndexTokens,
    items: list[str],
    texts: dict[str, str],
    max_text_chars: int,
    ask: str = TEXT_TO_SID[0],
) -> tuple[float | None, list[float]]:
    if not items:
        return None, []
    width = max(len(index.items[i]) for i in items)
    hits, right = 0, np.zeros(width)
    for item in items:
        target = tokenizer.convert_tokens_to_ids(list(index.items[item]))
        got = greedy_sid(model, tokenizer, texts[item][:max_text_chars], len(target), ask)
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
    em, per_position = exact_match(model, tokenizer, index, items, texts, max_text_chars, ask)
    return ProbeResult(len(items), em, per_position, level_rsa(model, tokenizer, index))
