"""``codebook-lstsq``: rows b + c M, (b, M) the least-squares fit of the items' text vectors
on their summed code vectors, against numpy (normal equations, tokenizer + numpy vectors)."""

from __future__ import annotations

import numpy as np
from initworld import TEXTS, make_sids, make_tokenizer
from test_init_codebook import books
from test_init_strategies import call, old_rows

from gti.init import InitContext


def test_rows_are_the_code_vectors_through_the_fitted_map():
    tok, sids = make_tokenizer(), make_sids()
    texts = {f"m{i}": t for i, t in enumerate(TEXTS)}
    old = old_rows(V=len(tok), d=6)
    cb = books()
    ctx = InitContext(sids=sids, item_texts=texts, tokenizer=tok, codebooks=cb)
    rows = call("codebook-lstsq", old, 9, context=ctx).numpy()

    table = old.numpy()
    items = list(sids.items)
    x = np.array(
        [table[tok(texts[i], add_special_tokens=False)["input_ids"]].mean(0) for i in items]
    )
    c = np.array([sum(cb[lv][code] for lv, code in enumerate(sids.items[i])) for i in items])
    a = np.hstack([np.ones((len(items), 1)), c])  # (12, 6)
    coef = np.linalg.solve(a.T @ a, a.T @ x)  # normal equations: (6, d)
    want = coef[0] + np.concatenate(cb) @ coef[1:]
    np.testing.assert_allclose(rows, want, rtol=1e-8, atol=1e-10)
