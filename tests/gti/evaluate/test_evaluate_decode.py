"""Trie beam search: only real items, the exact scores of the items it returns, the
exact top-K when the beam is wide enough, and transformers' beams and scores."""

from __future__ import annotations

import math

import pytest
import torch
from evalworld import random_prompts

from gti.evaluate.decode import (
    beam_search_batch,
    exact_scores_batch,
    left_pad,
    rank_exact,
    rank_items,
)
from gti.evaluate.trie import SidTrie

pytestmark = pytest.mark.numerics  # every test here compares scores or rankings

# Scores are sums of 3 log-probs of a float64 model, computed in different layouts
# (batched or not, cached or not, padded differently), which changes only the order of
# summation. Each log-prob is logit - logsumexp(logits), at the end of a dependency chain
# of ~1e3 float operations (2 layers of d = 64, MLP 128, attention over <= 15 positions)
# on values of magnitude <= ~10, so it moves by <= ~1e3 * eps64 (1.1e-16) * 10 ~ 1e-12;
# a score of 3 of them (6 terms) by <= ~1e-11. ATOL = 1e-9 leaves a margin of 100. A
# float32 model would put the same bound at ~1e-3, the size of real score gaps.
ATOL = 1e-9


def assert_same_ranking(
    items: torch.Tensor, ref_items: torch.Tensor, ref_scores: torch.Tensor, atol: float
) -> None:
    """Same items in the same order, except that items whose scores lie within ``atol``
    of a neighbour's (near-ties, which rounding may swap) need only occupy the same
    group of positions."""
    for row in range(len(ref_items)):
        gaps = (ref_scores[row, :-1] - ref_scores[row, 1:]).tolist()
        start = 0
        for k in range(len(gaps) + 1):
            if k == len(gaps) or gaps[k] > atol:  # a group of near-ties ends at k
                group = slice(start, k + 1)
                assert sorted(items[row, group].tolist()) == sorted(ref_items[row, group].tolist())
                start = k + 1


def setup(sid_model, n=6, seed=0):
    trie = SidTrie.build(sid_model.sids)
    base = sid_model.sids.levels[0].token_ids[0]  # prompts use original tokens only
    return trie, random_prompts(n, base, seed), sid_model.tokenizer.pad_token_id


def test_beam_search_yields_only_real_items_sorted(sid_model):
    trie, prompts, pad = setup(sid_model)
    for beams in (1, 3, 5):
        r = beam_search_batch(sid_model.model, prompts, trie, beams=beams, pad_id=pad)
        assert r.items.shape == (len(prompts), beams)
        assert ((r.items >= 0) & (r.items < trie.n_items)).all()
        for row in r.items.tolist():
            assert len(set(row)) == len(row)
        assert (r.scores[:, :-1] >= r.scores[:, 1:]).all()


def test_beam_scores_are_exact_scores(sid_model):
    trie, prompts, pad = setup(sid_model)
    exact = exact_scores_batch(sid_model.model, prompts, trie, pad_id=pad, chunk=7)  # (N, n_items)
    r = beam_search_batch(sid_model.model, prompts, trie, beams=4, pad_id=pad)
    torch.testing.assert_close(r.scores, exact.gather(1, r.items), atol=ATOL, rtol=0)


def test_wide_beam_equals_exhaustive_ranking(sid_model):
    """With as many beams as items no prefix is ever pruned: beam search is exact."""
    trie, prompts, pad = setup(sid_model)
    exact = rank_exact(exact_scores_batch(sid_model.model, prompts, trie, pad_id=pad), trie.n_items)
    beam = beam_search_batch(sid_model.model, prompts, trie, beams=trie.n_items, pad_id=pad)
    torch.testing.assert_close(beam.scores, exact.scores, atol=ATOL, rtol=0)
    assert_same_ranking(beam.items, exact.items, exact.scores, ATOL)


def test_more_beams_than_items_pads_with_no_item(sid_model):
    trie, prompts, pad = setup(sid_model, n=2)
    r = beam_search_batch(sid_model.model, prompts, trie, beams=trie.n_items + 3, pad_id=pad)
    assert (r.items[:, trie.n_items :] == -1).all()
    assert torch.isinf(r.scores[:, trie.n_items :]).all()
    assert sorted(r.items[0, : trie.n_items].tolist()) == list(range(trie.n_items))
    e = rank_items(sid_model.model, prompts, trie, beams=trie.n_items + 3, pad_id=pad, exact=True)
    assert (e.items[:, trie.n_items :] == -1).all()


def test_left_padding_does_not_change_scores(sid_model):
    trie, prompts, pad = setup(sid_model)
    together = beam_search_batch(sid_model.model, prompts, trie, beams=5, pad_id=pad)
    for i, p in enumerate(prompts):
        alone = beam_search_batch(sid_model.model, [p], trie, beams=5, pad_id=pad)
        torch.testing.assert_close(alone.scores[0], together.scores[i], atol=ATOL, rtol=0)


def test_batching_is_invisible(sid_model):
    trie, prompts, pad = setup(sid_model)
    kw = {"beams": 5, "pad_id": pad}
    one = rank_items(sid_model.model, prompts, trie, batch_size=len(prompts), **kw)
    two = rank_items(sid_model.model, prompts, trie, batch_size=2, **kw)
    torch.testing.assert_close(one.scores, two.scores, atol=ATOL, rtol=0)


def test_matches_transformers_generate(sid_model):
    """Same beams, same order and the same scores as generate(num_beams=W,
    prefix_allowed_tokens_fn=...) walking the same trie."""
    trie, prompts, pad = setup(sid_model, n=3, seed=1)
    W, L = 6, trie.depth
    tokens = trie.item_tokens().tolist()
    nested: dict = {}
    for t in tokens:
        node = nested
        for x in t:
            node = node.setdefault(x, {})
    ids, mask = left_pad(prompts, pad)
    T = ids.shape[1]

    def allowed(_batch_id: int, seq: torch.Tensor) -> list[int]:
        node = nested
        for x in seq[T:].tolist():
            node = node[x]
        return list(node)

    out = sid_model.model.generate(
        input_ids=ids,
        attention_mask=mask,
        num_beams=W,
        num_return_sequences=W,
        max_new_tokens=L,
        prefix_allowed_tokens_fn=allowed,
        do_sample=False,
        return_dict_in_generate=True,
        output_scores=True,
        pad_token_id=pad,
        eos_token_id=None,
        length_penalty=1.0,
    )
    item_of = {tuple(t): i for i, t in enumerate(tokens)}
    hf_items = [
        [item_of[tuple(s)] for s in seq] for seq in out.sequences[:, T:].view(-1, W, L).tolist()
    ]
    ours = beam_search_batch(sid_model.model, prompts, trie, beams=W, pad_id=pad)
    hf_scores = out.sequences_scores.view(-1, W) * L  # generate divides by length
    # generate() casts each step's logits to float32 before its log-softmax, so its
    # scores carry float32 rounding: per log-prob <= ~4 * eps32/2 * (max|logit| + log V)
    # (rounding of the logits, of the max shift and of the logsumexp); times L tokens.
    with torch.no_grad():
        logits = sid_model.model(input_ids=ids, attention_mask=mask).logits
    max_logit = float(logits.abs().max())
    vocab = sid_model.model.config.vocab_size
    hf_atol = L * 4 * 6e-8 * (2 * max_logit + math.log(vocab))
    assert hf_atol < 1e-4  # the bound stays far below this model's score gaps (~0.1)
    torch.testing.assert_close(ours.scores, hf_scores.double(), atol=hf_atol, rtol=0)
    assert_same_ranking(torch.tensor(hf_items), ours.items, ours.scores, hf_atol)
