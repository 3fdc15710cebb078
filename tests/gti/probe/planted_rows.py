"""Output rows planted so that constrained greedy decoding must answer each item's SID
(the probe's known-answer model; tests/gti/probe)."""

from __future__ import annotations

import torch

from gti.prompts import render


@torch.no_grad()
def plant(model, tok, src) -> None:
    """Output rows that make each item's own token the largest logit of its level, step by
    step: per level, the rows W (codes, d) with W h_i = e_{code of i} for the hidden states
    h_i (d,) after item i's prompt and its first k tokens (least squares, 12 items < d)."""
    assert model.get_output_embeddings().weight is not model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    items = src.items
    prompts = []
    for i in items:
        ex = render(tok, src.text_to_sid.format(text=src.texts[i]), "", 0)
        prompts.append(list(ex.input_ids[: ex.answer_start]))
    targets = [tok.convert_tokens_to_ids(list(src.index.items[i])) for i in items]
    for k in range(3):
        level = [
            i for i in range(len(tok)) if tok.convert_ids_to_tokens(i).startswith(f"<{'abc'[k]}_")
        ]
        H = torch.stack(
            [
                model(torch.tensor([p + t[:k]]), output_hidden_states=True).hidden_states[-1][0, -1]
                for p, t in zip(prompts, targets, strict=True)
            ],
            dim=1,
        )  # (d, n_items)
        Y = torch.zeros(len(level), len(items))
        for j, t in enumerate(targets):
            Y[level.index(t[k]), j] = 1.0
        head[level] = 50 * (Y @ torch.linalg.pinv(H))  # (codes, d)
