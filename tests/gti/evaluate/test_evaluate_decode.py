"""Trie beam search: only real items, the exact scores of the items it returns, the
exact top-K when the beam is wide enough, and transformers' beams and scores."""

from __future__ import annotations

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

ATOL = 1e-4  # float32 sums of 3 log-probs, computed in different batch layouts


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
    gaps = exact.scores[:, :-1] - exact.scores[:, 1:]
    for row in range(len(prompts)):
        # Same order wherever the scores are not tied within tolerance.
        for k in range(trie.n_items):
            tied_left = k > 0 and gaps[row, k - 1] < ATOL
            tied_right = k < trie.n_items - 1 and gaps[row, k] < ATOL
            if not (tied_left or tied_right):
                assert beam.items[row, k] == exact.items[row, k]


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
        input_ids=ids, attention_mask=mask, num_beams=W, num_return_sequences=W,
        max_new_tokens=L, prefix_allowed_tokens_fn=allowed, do_sample=False,
        return_dict_in_generate=True, output_scores=True, pad_token_id=pad,
        eos_token_id=None, length_penalty=1.0,
    )  # fmt: skip
    item_of = {tuple(t): i for i, t in enumerate(tokens)}
    hf_items = [
        [item_of[tuple(s)] for s in seq] for seq in out.sequences[:, T:].view(-1, W, L).tolist()
    ]
    ours = beam_search_batch(sid_model.model, prompts, trie, beams=W, pad_id=pad)
    assert ours.items.tolist() == hf_items
    hf_scores = out.sequences_scores.view(-1, W) * L  # generate divides by length
    torch.testing.assert_close(ours.scores, hf_scores, atol=ATOL, rtol=0)
