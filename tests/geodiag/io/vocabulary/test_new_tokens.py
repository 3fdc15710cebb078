"""The new-row resolvers answer in the order ``geodiag.io.vocabulary.new_tokens`` documents: each
source wins over every one below it, and steps aside when it has nothing to say."""

from __future__ import annotations

import json

import numpy as np
import pytest
from geodiag_fixtures import BASE_VOCAB, tokenizer_json

from geodiag.io.sources.options import ReadOptions
from geodiag.io.vocabulary import sidecar
from geodiag.io.vocabulary.new_tokens import RESOLVERS, Sources, declare, resolve_new_tokens
from geodiag.io.vocabulary.tokenizer import load_tokenizer

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
    order = ["arguments", "flags", "sidecar", "all_rows", "adapter", "base", "tokenizer"]
    assert [r.__name__ for r in RESOLVERS] == [f"from_{name}" for name in order]


def test_each_source_wins_over_those_below_it(sources):
    trainable = np.arange(BASE_VOCAB, BASE_VOCAB + N_NEW)
    flag = ReadOptions(new_tokens=(BASE_VOCAB, BASE_VOCAB + 8))
    named = declare(new_ids=[BASE_VOCAB + 3, BASE_VOCAB + 1])
    got = resolve_new_tokens(sources(opts=flag, trainable=trainable, declared=named))
    assert got.source == "argument" and got.ids.tolist() == [BASE_VOCAB + 3, BASE_VOCAB + 1]
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


# One definition of the new rows, fed as a checkpoint on disk, a numpy array, a torch
# tensor and a transformers model: every way in resolves it through RESOLVERS, so the
# same NewTokens and the same errors come out (the API and the callback call no other).
VOCAB, BASE, LEVEL_IDS = 60, 38, {"a": [44, 45, 46, 47], "b": [40, 41, 42, 43]}
DEFINITIONS = {
    "levels": (
        dict(levels=LEVEL_IDS, base_vocab_size=BASE),
        ([44, 45, 46, 47, 40, 41, 42, 43], ["a", "b"], [0, 0, 0, 0, 1, 1, 1, 1], BASE),
    ),
    "new_ids": (dict(new_ids=[47, 40, 52]), ([47, 40, 52], [], None, 40)),
}
FEEDS = {
    "file": lambda model, tmp: (model.save_pretrained(tmp / "ckpt"), tmp / "ckpt")[1],
    "numpy": lambda model, tmp: model.get_input_embeddings().weight.detach().numpy(),
    "tensor": lambda model, tmp: model.get_input_embeddings().weight,
    "model": lambda model, tmp: model,
}


def tiny_model():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
    )
    return transformers.LlamaForCausalLM(cfg)


@pytest.mark.parametrize("definition", list(DEFINITIONS))
@pytest.mark.parametrize("feed", list(FEEDS))
def test_one_definition_resolves_alike_from_every_source(feed, definition, tmp_path):
    from geodiag.api import open_source
    from geodiag.errors import InputError

    source = FEEDS[feed](tiny_model(), tmp_path)
    kwargs, (ids, level_names, level_index, base) = DEFINITIONS[definition]
    new = open_source(source, **kwargs).new
    assert new.source == "argument" and new.ids.tolist() == ids
    assert new.base_vocab_size == base and new.level_names == level_names
    assert (None if new.level_index is None else new.level_index.tolist()) == level_index
    if level_names:
        assert new.codes.tolist() == [0, 1, 2, 3] * 2
        assert new.tokens[:2] == ["<a_0>", "<a_1>"] and new.levels_source == "argument"
    else:
        assert new.tokens == ["<id 47>", "<id 40>", "<id 52>"]
    with pytest.raises(InputError) as bad:
        open_source(source, new_ids=[47, VOCAB + 3, VOCAB])
    assert (
        str(bad.value)
        == f"new_ids: token ids [{VOCAB + 3}, {VOCAB}] out of range for an embedding of {VOCAB} rows"
    )
    with pytest.raises(InputError, match="below every new id"):
        open_source(source, new_ids=[47, 40], base_vocab_size=41)


def test_a_sidecar_file_names_the_rows_its_levels_name(tmp_path):
    """The same levels written as semantic_ids.json: the file's own resolver, and the
    file given as ``levels=`` to rows in memory, agree with the levels given in Python."""
    from geodiag.api import open_source
    from geodiag.errors import InputError

    model = tiny_model()
    folder = FEEDS["file"](model, tmp_path)
    levels = [sidecar.Level(n, len(v), v) for n, v in LEVEL_IDS.items()]
    sidecar.save(sidecar.SemanticIds(BASE, levels, {}), folder)
    given = open_source(model, levels=LEVEL_IDS, base_vocab_size=BASE).new
    for new in (open_source(folder).new, open_source(model, levels=folder).new):
        assert new.source == "sidecar" and new.tokens == given.tokens
        assert new.ids.tolist() == given.ids.tolist() and new.base_vocab_size == BASE
        assert new.level_index.tolist() == given.level_index.tolist()
        assert new.codes.tolist() == given.codes.tolist()
    levels[1].token_ids[1] = VOCAB + 3
    sidecar.save(sidecar.SemanticIds(BASE, levels, {}), folder)
    tail = f"token ids [{VOCAB + 3}] out of range for an embedding of {VOCAB} rows"
    for source, levels_arg in ((folder, None), (model, folder)):
        with pytest.raises(InputError) as bad:
            open_source(source, levels=levels_arg)
        assert str(bad.value).endswith(tail), str(bad.value)
