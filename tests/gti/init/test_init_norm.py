"""``--norm-correct median``: every new row at the vocabulary's median row norm (numpy's
median), its direction kept, whatever strategy drew it."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from initworld import build_world
from safetensors.numpy import load_file
from test_init_cli import gti_init
from test_init_strategies import call, old_rows

from gti.init.norm import median_norm, norm_correct


@pytest.mark.parametrize("V", [400, 401])  # even: numpy averages the two middle norms
def test_median_norm_is_numpys(V):
    old = old_rows(V=V, d=8)
    assert median_norm(old) == pytest.approx(np.median(np.linalg.norm(old.numpy(), axis=1)))


@pytest.mark.parametrize("strategy", ["mean", "random", "full-covariance", "llamafactory-noise"])
def test_rows_land_on_the_median_norm_in_their_own_direction(strategy):
    old = old_rows(V=400, d=8).float()
    raw = call(strategy, old, 30)
    rows = norm_correct(raw, old, "median")
    assert rows.dtype == old.dtype
    r, x = rows.double().numpy(), raw.double().numpy()
    target = np.median(np.linalg.norm(old.double().numpy(), axis=1))
    np.testing.assert_allclose(np.linalg.norm(r, axis=1), target, rtol=1e-6)  # float32 rows
    cos = (r * x).sum(1) / np.linalg.norm(r, axis=1) / np.linalg.norm(x, axis=1)
    np.testing.assert_allclose(cos, 1.0, rtol=1e-6)
    assert norm_correct(raw, old, "none") is raw


def test_a_zero_row_stays_zero():
    rows = torch.zeros(2, 8, dtype=torch.float64)
    rows[1, 0] = 3.0
    out = norm_correct(rows, old_rows(), "median")
    assert torch.equal(out[0], rows[0]) and out[1, 0] == pytest.approx(median_norm(old_rows()))


def test_cli_records_the_rule_and_rescales_both_matrices_of_an_untied_model(tmp_path):
    world = build_world(tmp_path / "untied", tied=False)
    out = world.root / "median"
    res = gti_init(world, out, "--strategy", "full-covariance", "--norm-correct", "median")
    assert res.exit_code == 0, res.output
    assert json.loads((out / "init_config.json").read_text())["norm_correct"] == "median"
    sids = json.loads((out / "semantic_ids.json").read_text())
    assert sids["provenance"]["norm_correct"] == "median"
    base = sids["base_vocab_size"]
    tensors = load_file(out / "model.safetensors")
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        weight = tensors[name].astype("float64")
        target = np.median(np.linalg.norm(weight[:base], axis=1))
        np.testing.assert_allclose(np.linalg.norm(weight[base:], axis=1), target, rtol=1e-6)
