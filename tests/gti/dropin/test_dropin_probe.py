"""The held-out probe's constrained decoding (gti.dropin.probe): the trie of the index's
SIDs against a hand-written one, and greedy decoding under it emitting only SIDs the index
holds, where free decoding on the same model does not."""

from __future__ import annotations

from transformers import AutoModelForCausalLM, AutoTokenizer

from gti.dropin.index import read_index
from gti.dropin.probe import exact_match, greedy_sid, sid_trie
from gti.vocab import add_new_tokens


class _Ids:
    """A tokenizer stand-in: a token's id is its position in ``vocab``."""

    def __init__(self, vocab: list[str]) -> None:
        self.vocab = vocab

    def convert_tokens_to_ids(self, tokens: list[str]) -> list[int]:
        return [self.vocab.index(t) for t in tokens]


class _Index:
    def __init__(self, items: dict[str, tuple[str, ...]]) -> None:
        self.items = items


def test_the_trie_holds_each_prefix_and_what_continues_it():
    vocab = ["<a_1>", "<a_2>", "<b_1>", "<b_2>", "<c_1>"]
    index = _Index({"x": ("<a_1>", "<b_1>"), "y": ("<a_1>", "<b_2>"), "z": ("<a_2>", "<b_1>")})
    assert sid_trie(_Ids(vocab), index) == {(): [0, 1], (0,): [2, 3], (1,): [2]}


def test_constrained_greedy_decodes_only_the_index_sids(lcrec, lcrec_model):
    index = read_index(lcrec.index, None, None)
    tokenizer = AutoTokenizer.from_pretrained(lcrec_model)
    model = AutoModelForCausalLM.from_pretrained(lcrec_model)
    add_new_tokens(model, tokenizer, index.tokens, as_strings=True)
    trie = sid_trie(tokenizer, index)
    sids = {tuple(tokenizer.convert_tokens_to_ids(list(t))) for t in index.items.values()}
    items = list(index.items)[:6]
    texts = {i: f"item {i}" for i in items}
    free_valid = 0
    for item in items:
        n = len(index.items[item])
        assert tuple(greedy_sid(model, tokenizer, texts[item], n, trie=trie)) in sids
        free_valid += tuple(greedy_sid(model, tokenizer, texts[item], n)) in sids
    assert free_valid < len(items)  # the random rows alone do not make a frozen LM emit SIDs
    em, per_position = exact_match(model, tokenizer, index, items, texts, 200, trie=trie)
    assert 0.0 <= em <= 1.0 and len(per_position) == max(len(index.items[i]) for i in items)
