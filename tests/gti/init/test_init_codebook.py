"""``codebook-projection``: the rows' Gram matrix is the codebooks' (numpy) up to each
level's scale, and each level's median norm is the vocabulary's."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from initworld import make_sids
from safetensors.numpy import load_file, save_file
from test_init_cli import gti_init
from test_init_strategies import call, old_rows

from geodiag.errors import InputError
from gti.init import InitContext


def books(dim: int = 5) -> list[np.ndarray]:
    """Level a long, b and c shorter: residual levels, as an RQ-VAE leaves them."""
    rng = np.random.default_rng(0)
    sids = make_sids()
    return [
        rng.normal(size=(lv.size, dim)) * s
        for lv, s in zip(sids.levels, (1.0, 0.3, 0.05), strict=True)
    ]


def test_gram_matrix_is_the_codebooks_up_to_each_levels_scale():
    old = old_rows(V=401, d=16)
    cb = books()
    ctx = InitContext(sids=make_sids(), codebooks=cb)
    rows = call("codebook-projection", old, 9, context=ctx).numpy()

    m = np.median(np.linalg.norm(old.numpy(), axis=1))
    scale = np.concatenate([np.full(len(b), m / np.median(np.linalg.norm(b, axis=1))) for b in cb])
    codes = np.concatenate(cb)  # (9, 5), rows in (level, code) order
    want = np.outer(scale, scale) * (codes @ codes.T)  # one isometry: cross-level too
    np.testing.assert_allclose(rows @ rows.T, want, rtol=1e-10, atol=1e-12)
    start = 0
    for b in cb:
        level = rows[start : start + len(b)]
        assert np.median(np.linalg.norm(level, axis=1)) == pytest.approx(m, rel=1e-12)
        start += len(b)
    # the Gram equality above also says no vocabulary mean was added; seeded isometry:
    assert torch.equal(torch.from_numpy(rows), call("codebook-projection", old, 9, context=ctx))
    assert not np.allclose(rows, call("codebook-projection", old, 9, seed=1, context=ctx).numpy())


def test_a_token_without_a_code_vector_gets_the_median_norm():
    old = old_rows(V=400, d=16)
    cb = books()
    ctx = InitContext(codebooks=cb, row_codes=[(0, 2), None, (1, 0), (2, 1)])
    rows = call("codebook-projection", old, 4, context=ctx).numpy()
    m = np.median(np.linalg.norm(old.numpy(), axis=1))
    assert np.linalg.norm(rows[1]) == pytest.approx(m, rel=1e-12)
    # a level with one row: that row is at the median norm
    assert np.linalg.norm(rows[2]) == pytest.approx(m, rel=1e-12)


def test_needs_codebooks_that_fit():
    with pytest.raises(InputError, match="codebooks"):
        call("codebook-projection", old_rows(d=4), 9, context=InitContext(sids=make_sids()))
    ctx = InitContext(sids=make_sids(), codebooks=books(dim=5))
    with pytest.raises(InputError, match="dimension 5"):
        call("codebook-projection", old_rows(d=4), 9, context=ctx)


def test_cli_projects_the_sids_codebooks_and_spares_a_level_without_one(world):
    """A dedup level has no codebook: its tokens get random directions at the median norm,
    the other levels their code vectors (cosines against numpy)."""
    books = load_file(world.sids_dir / "codebooks.safetensors")
    save_file(
        {k: v for k, v in books.items() if k != "c"}, world.sids_dir / "codebooks.safetensors"
    )
    out = world.root / "proj"
    res = gti_init(world, out, "--strategy", "codebook-projection")
    assert res.exit_code == 0, res.output
    weight = load_file(out / "model.safetensors")["model.embed_tokens.weight"].astype("float64")
    base = json.loads((out / "semantic_ids.json").read_text())["base_vocab_size"]
    rows = weight[base:]  # (9, d): a (4), b (3), c (2)
    vecs = np.concatenate([books["a"], books["b"]]).astype("float64")
    unit = rows[:7] / np.linalg.norm(rows[:7], axis=1, keepdims=True)
    want = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    np.testing.assert_allclose(unit @ unit.T, want @ want.T, atol=1e-5)
    m = np.median(np.linalg.norm(weight[:base], axis=1))
    np.testing.assert_allclose(np.linalg.norm(rows[7:], axis=1), m, rtol=1e-5)
