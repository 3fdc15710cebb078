"""Vocabulary extension: names, ids, tokenization, tied and untied heads."""

from __future__ import annotations

import pytest
import torch
from initworld import make_model, make_sids, make_tokenizer

from geodiag.errors import InputError
from gti.vocab import extend_vocabulary, new_rows, old_rows, set_new_rows, with_token_ids


@pytest.mark.parametrize("tied", [True, False])
def test_one_token_per_code_after_the_old_vocabulary(tied):
    tok = make_tokenizer()
    model = make_model(tok, tied=tied)
    V = len(tok)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    sids = make_sids()
    ext = extend_vocabulary(model, tok, sids)

    assert ext.base_vocab_size == V and ext.tied is tied and ext.n_new == 9
    assert list(ext.new_token_ids) == list(range(V, V + 9))
    assert tok.convert_ids_to_tokens(list(ext.new_token_ids)) == sids.token_strings()
    assert sids.token_strings()[:2] == ["<a_0>", "<a_1>"] and "<c_1>" in sids.token_strings()
    assert not any(
        t.special for t in tok.added_tokens_decoder.values() if t.content.startswith("<a_")
    )
    assert tok("x <a_3><b_0><c_1>.", add_special_tokens=False)["input_ids"][1:4] == [
        V + 3,
        V + 4,
        V + 8,
    ]
    assert model.get_input_embeddings().weight.shape[0] == V + 9
    assert model.get_output_embeddings().weight.shape[0] == V + 9
    assert (model.get_output_embeddings().weight is model.get_input_embeddings().weight) is tied
    for matrix in ("input",) if tied else ("input", "output"):
        key = "model.embed_tokens.weight" if matrix == "input" else "lm_head.weight"
        assert torch.equal(old_rows(model, ext, matrix), before[key])  # old rows untouched
        rows = torch.full((9, 64), 0.5)
        set_new_rows(model, ext, matrix, rows)
        assert torch.equal(new_rows(model, ext, matrix), rows)

    filled = with_token_ids(sids, ext)
    assert filled.has_token_ids and not sids.has_token_ids
    assert filled.levels[1].token_ids == [V + 4, V + 5, V + 6] and filled.base_vocab_size == V


def test_refuses_a_tokenizer_that_already_has_sid_tokens():
    tok = make_tokenizer()
    model = make_model(tok)
    extend_vocabulary(model, tok, make_sids())
    with pytest.raises(InputError, match="already has"):
        extend_vocabulary(model, tok, make_sids())


@pytest.mark.parametrize("tied", [True, False])
def test_padding_to_a_multiple_adds_zero_rows_that_are_not_new_tokens(tied):
    tok = make_tokenizer()
    model = make_model(tok, tied=tied)
    V = len(tok)
    sids = make_sids()
    ext = extend_vocabulary(model, tok, sids, pad_to_multiple_of=64)

    n_rows = model.get_input_embeddings().weight.shape[0]
    assert n_rows % 64 == 0 and n_rows > V + 9
    assert list(ext.new_token_ids) == tok.convert_tokens_to_ids(sids.token_strings())
    assert ext.base_vocab_size == V and ext.n_new == 9
    for matrix in ("input",) if tied else ("input", "output"):
        weight = model.get_input_embeddings() if matrix == "input" else model.lm_head
        assert weight.weight.shape[0] == n_rows
        assert bool((weight.weight[V + 9 :] == 0).all())  # padding: zero, not a random draw
