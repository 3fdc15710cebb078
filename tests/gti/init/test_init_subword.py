"""``subword``: each new row = the mean of the rows of the pieces the original tokenizer
splits the token's string into, against the tiny tokenizer's own rule (its vocabulary and
its pre-tokenizer's split, applied here by hand) + numpy."""

from __future__ import annotations

import re

import numpy as np
from safetensors.numpy import load_file
from test_init_cli import gti_init
from test_init_strategies import call, old_rows
from transformers import AutoTokenizer

from gti.init import InitContext
from gti.models.tiny import build_tiny_tokenizer

NEW = ["<a_0>", "<a_1>", "<b_0>", "<zz_9>", "plain", "two words"]


def by_hand(tok, token: str) -> list[int]:
    """The tiny tokenizer's rule: lower-case, split into words and punctuation runs, each
    piece its vocabulary id or [UNK]'s."""
    vocab = tok.get_vocab()
    return [vocab.get(p, vocab["[UNK]"]) for p in re.findall(r"\w+|[^\w\s]+", token.lower())]


def test_rows_are_the_mean_of_the_original_pieces():
    tok = build_tiny_tokenizer(["< > a_0 a_1 b_0 plain two words"])
    old = old_rows(V=len(tok), d=6)
    ctx = InitContext(new_tokens=NEW, base_tokenizer=tok)
    rows = call("subword", old, len(NEW), context=ctx).numpy()
    table = old.numpy()
    want = np.array([table[by_hand(tok, t)].mean(axis=0) for t in NEW])
    np.testing.assert_allclose(rows, want, rtol=1e-12, atol=1e-12)
    assert len(by_hand(tok, "<a_0>")) == 3 and not np.allclose(rows[0], rows[1])
    # <zz_9>: "zz_9" is no word of the tokenizer, so [UNK]'s row counts for it
    assert by_hand(tok, "<zz_9>")[1] == tok.get_vocab()["[UNK]"]


def test_cli_splits_with_the_tokenizer_before_the_new_tokens(world):
    out = world.root / "subword"
    res = gti_init(world, out, "--strategy", "subword")
    assert res.exit_code == 0, res.output
    base_tok = AutoTokenizer.from_pretrained(world.model_dir)  # without the SID tokens
    base = load_file(world.model_dir / "model.safetensors")["model.embed_tokens.weight"]
    weight = load_file(out / "model.safetensors")["model.embed_tokens.weight"]
    strings = world.sids.token_strings()
    want = np.array([base[by_hand(base_tok, t)].astype("float64").mean(axis=0) for t in strings])
    np.testing.assert_allclose(weight[len(base) :], want, rtol=1e-6, atol=1e-7)
