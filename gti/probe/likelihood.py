"""SID -> text: how likely the model finds each item's text after its own SID, against
after another item's SID.

The prompt is the SID -> text template with the SID, the answer the item's text (cut as
grounding cut it) and the end-of-turn token, rendered as grounding renders it
(``gti.prompts.render``, direction 1). The figure per item is the mean log-likelihood of
the answer tokens (nats per token, the quantity grounding's loss lowers). The shuffle is
a seeded derangement: the items in a seeded order, each paired with the next one's SID,
so no item keeps its own.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from gti.prompts import pad_id_of, pad_right, render


def derangement(n: int, seed: int) -> np.ndarray:
    """(n,) a permutation with no fixed point (n >= 2): a seeded cycle through all n."""
    if n < 2:
        raise ValueError(f"a derangement needs n >= 2, got {n}")
    order = np.random.default_rng(seed).permutation(n)
    perm = np.empty(n, dtype=np.int64)
    perm[order] = np.roll(order, -1)  # order[j] takes order[j + 1]'s SID
    return perm


@torch.no_grad()
def answer_loglik(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[str],
    answers: list[str],
    *,
    batch_size: int = 8,
) -> np.ndarray:
    """(n,) mean log-likelihood (nats per token) of each answer after its prompt."""
    examples = [render(tokenizer, p, a, 1) for p, a in zip(prompts, answers, strict=True)]
    device = model.get_input_embeddings().weight.device
    pad = pad_id_of(tokenizer)
    out = np.empty(len(examples))
    order = sorted(range(len(examples)), key=lambda i: len(examples[i].input_ids))
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        batch = pad_right([examples[i] for i in rows], pad)
        ids = batch.input_ids.to(device)  # (B, T)
        logits = model(input_ids=ids, attention_mask=batch.attention_mask.to(device)).logits
        logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)  # (B, T-1, V): predicts t+1
        token_logp = logp.gather(-1, ids[:, 1:, None])[..., 0]  # (B, T-1)
        mask = batch.answer_mask[:, 1:].to(device)  # (B, T-1): the answer's tokens
        per_row = (token_logp * mask).sum(1) / mask.sum(1)  # (B,)
        out[rows] = per_row.double().cpu().numpy()
    return out


def true_and_shuffled(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sids: list[str],
    texts: list[str],
    template: str,
    *,
    seed: int,
    batch_size: int = 8,
) -> tuple[np.ndarray, np.ndarray]:
    """(n,) each text's mean log-likelihood after its own SID, and after the SID the
    seeded derangement gives it."""
    perm = derangement(len(sids), seed)
    true = answer_loglik(
        model, tokenizer, [template.format(sid=s) for s in sids], texts, batch_size=batch_size
    )
    shuffled = answer_loglik(
        model,
        tokenizer,
        [template.format(sid=sids[j]) for j in perm],
        texts,
        batch_size=batch_size,
    )
    return true, shuffled
