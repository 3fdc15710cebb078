"""drift: per-token cosine and summary statistics against numpy, and planted cases (no
change, a rotation that keeps all structure, independent rows that keep none)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from geodiag.metrics.drift import drift

# rsa()'s sample settings have no defaults (callers pass them; AnalyzeOptions holds
# geodiag's): the tests use geodiag's.
SAMPLE = dict(seed=0, max_items=1000)


def test_matches_explicit_computation():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(40, 8))
    b = a + 0.7 * rng.normal(size=(40, 8))
    d = drift(a, b, n_permutations=100, **SAMPLE)
    cos = np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    np.testing.assert_allclose(d.per_token_cosine, cos, atol=1e-14)
    assert d.n_tokens == 40
    assert d.cosine_mean == pytest.approx(cos.mean(), abs=1e-14)
    assert d.cosine_median == pytest.approx(np.median(cos), abs=1e-14)
    assert d.cosine_min == pytest.approx(cos.min(), abs=1e-14)
    assert list(d.cosine_quantiles) == ["p10", "p25", "p75", "p90"]
    expected_q = np.percentile(cos, [10, 25, 75, 90])
    assert list(d.cosine_quantiles.values()) == pytest.approx(expected_q, abs=1e-14)
    assert d.relative_change == pytest.approx(np.linalg.norm(b - a) / np.linalg.norm(a), rel=1e-13)
    assert d.structure_rsa.n_permutations == 100 and d.undefined_reason is None


def test_no_change():
    a = np.random.default_rng(1).normal(size=(30, 6))
    d = drift(a, a.copy(), n_permutations=200, **SAMPLE)
    assert d.per_token_cosine == pytest.approx([1.0] * 30, abs=1e-14)
    assert d.relative_change == 0.0
    assert d.structure_rsa.spearman == pytest.approx(1.0)
    assert d.structure_rsa.p_value == 1 / 201


def test_rotation_moves_every_token_but_keeps_the_structure():
    rng = np.random.default_rng(2)
    a = rng.normal(size=(50, 16))
    rotation, _ = np.linalg.qr(rng.normal(size=(16, 16)))
    d = drift(a, a @ rotation, n_permutations=200, **SAMPLE)
    assert d.cosine_mean < 0.5
    assert d.structure_rsa.spearman == pytest.approx(1.0, abs=1e-12)
    assert d.structure_rsa.p_value == 1 / 201


def test_independent_rows_keep_no_structure():
    rng = np.random.default_rng(3)
    d = drift(rng.normal(size=(60, 16)), rng.normal(size=(60, 16)), n_permutations=200, **SAMPLE)
    assert abs(d.cosine_mean) < 0.1
    assert abs(d.structure_rsa.spearman) < 0.15
    assert d.structure_rsa.p_value > 0.05


def test_zero_rows_are_none_with_a_reason():
    rng = np.random.default_rng(4)
    a, b = rng.normal(size=(6, 3)), rng.normal(size=(6, 3))
    b[2] = 0.0
    d = drift(a, b, n_permutations=10, **SAMPLE)
    assert d.per_token_cosine[2] is None
    assert sum(c is None for c in d.per_token_cosine) == 1
    assert "1 token" in d.undefined_reason
    assert d.structure_rsa.spearman is None
    json.dumps(dataclasses.asdict(d), allow_nan=False)

    zero = np.zeros((6, 3))
    d = drift(zero, b, n_permutations=10, **SAMPLE)
    assert d.relative_change is None and d.cosine_mean is None
    assert d.cosine_quantiles == {"p10": None, "p25": None, "p75": None, "p90": None}
    json.dumps(dataclasses.asdict(d), allow_nan=False)


def test_mean_init_to_trained_is_strict_json():
    rng = np.random.default_rng(5)
    a = np.tile(rng.normal(size=8), (12, 1))  # exact mean init: RSA undefined
    d = drift(a, a + rng.normal(size=(12, 8)), n_permutations=20, **SAMPLE)
    assert d.structure_rsa.spearman is None and "identical" in d.structure_rsa.undefined_reason
    assert "rows of the first checkpoint are identical" in d.structure_rsa.undefined_reason
    assert d.cosine_mean is not None
    json.dumps(dataclasses.asdict(d), allow_nan=False)


def test_shape_mismatch_names_both_shapes():
    with pytest.raises(ValueError, match=r"\(4, 3\).*\(4, 5\)"):
        drift(np.ones((4, 3)), np.ones((4, 5)), n_permutations=0, **SAMPLE)
