"""The SID trie as tensors: every path it allows is a real item, and only those."""

from __future__ import annotations

import itertools

import pytest
import torch
from evalworld import CODES, LEVELS

from geodiag.io.vocabulary.sidecar import Level, SemanticIds
from gti.evaluate.trie import SidTrie


def sids_with_ids(codes=CODES) -> SemanticIds:
    levels, next_id = [], 100
    for name, size in LEVELS:
        levels.append(Level(name, size, list(range(next_id, next_id + size))))
        next_id += size
    return SemanticIds(
        base_vocab_size=100, levels=levels, items={f"i{k}": list(c) for k, c in enumerate(codes)}
    )


def walk(trie: SidTrie, codes: tuple[int, ...]) -> int | None:
    """Follow ``codes`` from the root; the leaf's item index, or None if not allowed."""
    node = 0
    for d, c in enumerate(codes):
        if not trie.allowed(d, torch.tensor([node]))[0, c]:
            return None
        node = int(trie.children[d][node, c])
    return node


def test_allows_exactly_the_catalog():
    trie = SidTrie.build(sids_with_ids())
    assert trie.n_nodes == [1, 3, 9, len(CODES)]  # root, 3 first codes, 9 (a, b) prefixes
    every = itertools.product(*(range(size) for _, size in LEVELS))
    reached = {codes: walk(trie, codes) for codes in every}
    real = {tuple(c): k for k, c in enumerate(CODES)}
    assert {c: k for c, k in reached.items() if k is not None} == real


def test_dead_rows_stay_dead():
    trie = SidTrie.build(sids_with_ids())
    for d in range(trie.depth):
        dead = trie.n_nodes[d]
        assert not trie.allowed(d, torch.tensor([dead])).any()
        assert (trie.children[d][dead] == trie.n_nodes[d + 1]).all()


def test_tokens_and_prefixes():
    sids = sids_with_ids()
    trie = SidTrie.build(sids)
    tokens = trie.item_tokens()
    expect = [
        [lv.token_ids[c] for lv, c in zip(sids.levels, codes, strict=True)] for codes in CODES
    ]
    assert tokens.tolist() == expect
    for d in range(trie.depth + 1):
        assert (trie.prefix_codes[d][trie.node_of[d]] == trie.codes[:, :d]).all()


def test_refuses_ambiguous_or_unextended_sids():
    with pytest.raises(ValueError, match="share a SID"):
        SidTrie.build(sids_with_ids([[0, 0, 0], [0, 0, 0]]))
    bare = sids_with_ids()
    for lv in bare.levels:
        lv.token_ids = []
    with pytest.raises(ValueError, match="no token ids"):
        SidTrie.build(bare)
