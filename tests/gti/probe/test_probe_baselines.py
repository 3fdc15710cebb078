"""The baselines' answers on a hand-written index, the derangement of the shuffled pairs,
and the SID -> text likelihood against transformers' own loss."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from gti.probe.baselines import most_frequent_codes, most_frequent_path, tie_break_path
from gti.probe.likelihood import answer_loglik, derangement
from gti.prompts import render

# Ids: level a 1-3, level b 10-12, a de-duplication level d 20-21 on two items only.
SIDS = [(1, 10), (1, 11), (2, 10), (2, 11, 20), (2, 11, 21), (3, 12)]


def trie(sids):
    nxt: dict[tuple, set[int]] = {}
    for s in sids:
        for k in range(len(s)):
            nxt.setdefault(s[:k], set()).add(s[k])
    return {k: sorted(v) for k, v in nxt.items()}


def test_tie_break_is_the_lowest_id_path():
    assert tie_break_path(trie(SIDS), 3) == [1, 10, None]  # (1, 10) has no third token


def test_most_frequent_per_level_and_as_a_path():
    # level a: 2 three times; b: 11 three times, 10 twice; d: 20 and 21 once each, the lowest
    assert most_frequent_codes(SIDS, 3) == [2, 11, 20]
    # below 2: 11 twice, 10 once; below (2, 11): 20 and 21 once each, the lowest wins
    assert most_frequent_path(SIDS, 3) == [2, 11, 20]
    assert most_frequent_path([(1, 10), (2, 11), (2, 12)], 3) == [2, 11, None]


@pytest.mark.parametrize("n", [2, 3, 12, 101])
def test_derangement_moves_every_item_and_follows_its_seed(n):
    perm = derangement(n, seed=5)
    assert sorted(perm.tolist()) == list(range(n))
    assert not np.any(perm == np.arange(n))
    assert np.array_equal(perm, derangement(n, seed=5))
    with pytest.raises(ValueError):
        derangement(1, seed=0)


def test_answer_loglik_is_minus_the_models_own_answer_loss(mean_ckpt):
    model = AutoModelForCausalLM.from_pretrained(mean_ckpt).eval()
    tok = AutoTokenizer.from_pretrained(mean_ckpt)
    prompts = ["<a_0><b_1><c_0> Toy Story", "<a_1><b_2><c_1>"]
    answers = ["Toy Story (1995).", "Four Rooms (1995). Genres: Thriller."]
    ours = answer_loglik(model, tok, prompts, answers, batch_size=2)
    for k, (p, a) in enumerate(zip(prompts, answers, strict=True)):
        ex = render(tok, p, a, 1)
        ids = torch.tensor([ex.input_ids])
        labels = ids.clone()
        labels[0, : ex.answer_start] = -100  # the loss of the answer tokens only
        with torch.no_grad():
            loss = model(input_ids=ids, labels=labels).loss
        assert ours[k] == pytest.approx(-loss.item(), abs=1e-5)
