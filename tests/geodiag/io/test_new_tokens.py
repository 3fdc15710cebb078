"""The new-row resolvers answer in the order ``geodiag.io.new_tokens`` documents: each
source wins over every one below it, and steps aside when it has nothing to say."""

from __future__ import annotations

import json

import numpy as np
import pytest
from geodiag_fixtures import BASE_VOCAB, tokenizer_json

from geodiag.io import sidecar
from geodiag.io.new_tokens import RESOLVERS, Sources, resolve_new_tokens
from geodiag.io.options import ReadOptions
from geodiag.io.tokenizer import load_tokenizer

N_NEW = 24


@pytest.fixture
def sources(make_ckpt, tmp_path):
    """Sources with every file present: tokenizer, sidecar, a base tokenizer."""
    root = make_ckpt("random")
    (tmp_path / "base").mkdir()
    base_path = tmp_path / "base" / "tokenizer.json"
    base_path.write_text(json.dumps(tokenizer_json(BASE_VOCAB, [])))
    side_path = root / sidecar.FILENAME

    def make(**changes) -> Sources:
        fields = dict(
            root=root,
            opts=ReadOptions(),
            n_rows=BASE_VOCAB + N_NEW,
            tokenizer=load_tokenizer(root / "tokenizer.json"),
            sidecar=sidecar.load(side_path),
            sidecar_path=side_path,
            base_tokenizer=load_tokenizer(base_path),
        )
        return Sources(**{**fields, **changes})

    return make


def test_the_resolvers_are_tried_in_the_documented_order():
    order = ["flags", "sidecar", "all_rows", "adapter", "base", "tokenizer"]
    assert [r.__name__ for r in RESOLVERS] == [f"from_{name}" for name in order]


def test_each_source_wins_over_those_below_it(sources):
    trainable = np.arange(BASE_VOCAB, BASE_VOCAB + N_NEW)
    flag = ReadOptions(new_tokens=(BASE_VOCAB, BASE_VOCAB + 8))
    assert resolve_new_tokens(sources(opts=flag, trainable=trainable)).source == "flag"
    assert resolve_new_tokens(sources(trainable=trainable)).source == "sidecar"
    every = ReadOptions(all_rows_new=True)
    got = resolve_new_tokens(sources(opts=every, trainable=trainable))
    assert got.source == "sidecar" and got.base_vocab_size == 0
    assert resolve_new_tokens(sources(sidecar=None, opts=every, trainable=trainable)).source == (
        "all rows"
    )
    assert resolve_new_tokens(sources(sidecar=None, trainable=trainable)).source == "adapter"
    assert resolve_new_tokens(sources(sidecar=None)).source == "base"
    assert resolve_new_tokens(sources(sidecar=None, base_tokenizer=None)).source == "tokenizer"


def test_a_sidecar_naming_other_rows_than_the_adapter_trained_steps_aside(sources):
    other = np.arange(BASE_VOCAB + 1, BASE_VOCAB + 5)
    new = resolve_new_tokens(sources(trainable=other))
    assert new.source == "adapter" and new.ids.tolist() == other.tolist()


def test_token_name_levels_for_every_source_but_the_sidecar(sources):
    new = resolve_new_tokens(sources(sidecar=None))
    assert new.levels_source == "token names" and new.level_names == ["a", "b", "c"]
    assert resolve_new_tokens(sources()).levels_source == "sidecar"
