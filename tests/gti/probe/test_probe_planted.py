"""The probe's figures on models whose answer is known: a mean-init checkpoint (every new
row identical) scores exactly the tie-break baseline, item by item, and its SID -> text
likelihood cannot tell its own SID from another; the same checkpoint with output rows
planted so that greedy decoding must emit each item's SID scores exact match 1."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from gti.probe.config import ProbeConfig
from gti.probe.measure import probe_model
from gti.probe.source import resolve_source
from gti.prompts import render


def _load(ckpt):
    model = AutoModelForCausalLM.from_pretrained(ckpt, local_files_only=True).eval()
    return model, AutoTokenizer.from_pretrained(ckpt, local_files_only=True)


def test_mean_init_scores_the_tie_break_baseline(mean_ckpt):
    model, tok = _load(mean_ckpt)
    src = resolve_source(ProbeConfig(checkpoint=mean_ckpt))
    r = probe_model(model, tok, src, n_resamples=200)
    assert r.n_items == 12 and not r.held_out  # gti init grounds every item: a sample, said so
    assert r.notes == [src.how] and "no held-out set" in src.how
    assert r.model == r.tie_break.decoding  # hits per level and exact, intervals and all
    assert r.tie_break.answer == ["<a_0>", "<b_0>", "<c_0>"]  # the lowest ids, level by level
    assert r.model.exact_match.hits == 1  # m0 is <a_0><b_0><c_0>
    lik = r.likelihood
    assert lik.true_mean == lik.shuffled_mean and lik.difference.estimate == 0
    assert lik.true_wins.hits == 0 and lik.p_value == 1.0


@torch.no_grad()
def _plant(model, tok, src) -> None:
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


def test_planted_output_rows_score_exact_match_one(mean_ckpt):
    model, tok = _load(mean_ckpt)
    src = resolve_source(ProbeConfig(checkpoint=mean_ckpt))
    _plant(model, tok, src)
    r = probe_model(model, tok, src, n_resamples=200)
    assert r.model.exact_match.hits == r.n_items == 12
    assert [lv.accuracy.estimate for lv in r.model.levels] == [1.0, 1.0, 1.0]
    assert r.model.exact_match.low > r.tie_break.decoding.exact_match.high
    assert r.model.exact_match.low > r.most_frequent.decoding.exact_match.high
