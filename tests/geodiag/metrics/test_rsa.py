"""rsa: Spearman against scipy on explicit triangles, the permutation p-value against a slow
explicit loop, planted shared / independent structure, and every undefined case."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import scipy.stats

from geodiag.metrics.rsa import _average_ranks, dissimilarity, rsa

# rsa()'s sample settings have no defaults (callers pass them; AnalyzeOptions holds
# geodiag's): the tests use geodiag's.
SAMPLE = dict(seed=0, max_items=1000)


def explicit_dissimilarity(x: np.ndarray) -> np.ndarray:
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    return 1.0 - u @ u.T


def codebook_pair(n: int, seed: int, noise: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    """(token rows (n, 32), codebook (n, 8)): rows = codebook @ random projection + noise."""
    rng = np.random.default_rng(seed)
    book = rng.normal(size=(n, 8))
    rows = book @ rng.normal(size=(8, 32)) + noise * rng.normal(size=(n, 32))
    return rows, book


def test_dissimilarity_matches_one_minus_cosine():
    x = np.random.default_rng(0).normal(size=(12, 5))
    d = dissimilarity(x)
    np.testing.assert_allclose(d, explicit_dissimilarity(x), atol=1e-14)
    assert np.all(np.diag(d) == 0.0)
    np.testing.assert_array_equal(d, d.T)


def test_dissimilarity_keeps_precision_for_nearly_parallel_rows():
    t = 1e-6
    x = np.array([[1.0, 0.0], [math.cos(t), math.sin(t)], [1.0, 2 * t]])
    d = dissimilarity(x)
    # 1 - cos(t) = 2 sin^2(t / 2), computed without cancellation.
    assert d[0, 1] == pytest.approx(2 * math.sin(t / 2) ** 2, rel=1e-6)
    assert d[0, 2] == pytest.approx(2 * math.sin(math.atan(2 * t) / 2) ** 2, rel=1e-6)


def test_dissimilarity_marks_zero_rows():
    x = np.random.default_rng(1).normal(size=(4, 3))
    x[1] = 0.0
    d = dissimilarity(x)
    assert np.isnan(d[1]).all() and np.isnan(d[:, 1]).all()


@pytest.mark.parametrize("values", [[3.0, 1.0, 2.0], [1.0, 1.0, 1.0], [5.0], [], "random", "ties"])
def test_average_ranks_match_scipy(values):
    rng = np.random.default_rng(11)
    if values == "random":
        values = rng.normal(size=500)
    elif values == "ties":
        values = rng.integers(0, 7, size=500).astype(float)
    t = np.asarray(values, dtype=np.float64)
    np.testing.assert_array_equal(_average_ranks(t), scipy.stats.rankdata(t))


def test_spearman_matches_scipy_on_the_triangles():
    rng = np.random.default_rng(2)
    a = rng.normal(size=(30, 6))
    b = a[:, :4] + 0.5 * rng.normal(size=(30, 4))
    iu = np.triu_indices(30, k=1)
    expected = scipy.stats.spearmanr(
        explicit_dissimilarity(a)[iu], explicit_dissimilarity(b)[iu]
    ).statistic
    r = rsa(a, b, n_permutations=0, **SAMPLE)
    assert r.spearman == pytest.approx(expected, abs=1e-12)
    assert r.p_value is None and r.undefined_reason is None
    assert (r.n_items, r.n_total, r.n_permutations, r.sampled) == (30, 30, 0, False)


def test_duplicate_rows_tie_like_scipy_average_ranks():
    # Exact mean init leaves untrained tokens identical: their dissimilarities must tie.
    rng = np.random.default_rng(3)
    base = rng.normal(size=(6, 5))
    a = base[rng.integers(0, 6, size=20)]  # (20, 5), many duplicated rows
    b = a[:, :3] + 0.3 * rng.normal(size=(20, 3))
    iu = np.triu_indices(20, k=1)
    da = dissimilarity(a)[iu]
    assert np.sum(da == 0.0) == sum(
        math.comb(int(c), 2) for c in np.unique(a, axis=0, return_counts=True)[1]
    )
    # The reference 1 - u . u breaks these ties by rounding noise; snap it to 12 decimals.
    ta = np.round(explicit_dissimilarity(a)[iu], 12)
    tb = np.round(explicit_dissimilarity(b)[iu], 12)
    assert len(np.unique(ta)) == len(np.unique(da))
    expected = scipy.stats.spearmanr(ta, tb).statistic
    assert rsa(a, b, n_permutations=0, **SAMPLE).spearman == pytest.approx(expected, abs=1e-12)


def test_parallel_rows_have_zero_dissimilarity():
    x = np.outer([1.0, 3.0, 7.0, 0.1], [0.3, -1.7, 2.9])  # rows parallel, norms differ
    assert np.all(dissimilarity(x) == 0.0)


def slow_mantel_p(a: np.ndarray, b: np.ndarray, n_permutations: int, seed: int) -> float:
    n = len(a)
    iu = np.triu_indices(n, k=1)
    da, db = explicit_dissimilarity(a), explicit_dissimilarity(b)
    r_obs = scipy.stats.spearmanr(da[iu], db[iu]).statistic
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(n_permutations):
        perm = rng.permutation(n)
        hits += scipy.stats.spearmanr(da[iu], db[perm][:, perm][iu]).statistic >= r_obs
    return (1 + hits) / (1 + n_permutations)


@pytest.mark.parametrize("noise", [0.3, 1.0, 3.0])
def test_p_value_matches_slow_explicit_loop(noise):
    rng = np.random.default_rng(4)
    a = rng.normal(size=(9, 5))
    b = a[:, :3] + noise * rng.normal(size=(9, 3))
    r = rsa(a, b, n_permutations=200, seed=7, max_items=1000)
    assert r.p_value == slow_mantel_p(a, b, 200, seed=7)
    assert r.n_permutations == 200


def test_codebook_derived_rows_share_structure():
    rows, book = codebook_pair(256, seed=5)
    r = rsa(rows, book, n_permutations=1000, **SAMPLE)
    assert r.spearman > 0.85
    assert r.p_value == 1 / 1001


def test_independent_rows_share_no_structure():
    rng = np.random.default_rng(6)
    r = rsa(rng.normal(size=(80, 32)), rng.normal(size=(80, 8)), n_permutations=1000, **SAMPLE)
    assert abs(r.spearman) < 0.1
    assert r.p_value > 0.05


def test_large_inputs_use_a_seeded_sample():
    rows, book = codebook_pair(50, seed=7, noise=0.5)
    r = rsa(rows, book, n_permutations=0, seed=3, max_items=20)
    assert (r.sampled, r.n_items, r.n_total) == (True, 20, 50)
    keep = np.sort(np.random.default_rng(3).choice(50, size=20, replace=False))
    assert r.spearman == rsa(rows[keep], book[keep], n_permutations=0, **SAMPLE).spearman
    assert rsa(rows, book, n_permutations=0, seed=3, max_items=20) == r


def test_identical_rows_are_undefined_not_nan():
    rng = np.random.default_rng(8)
    tokens = np.tile(rng.normal(size=16), (10, 1))  # exact mean initialization
    r = rsa(tokens, rng.normal(size=(10, 4)), n_permutations=0, **SAMPLE)
    assert r.spearman is None and r.p_value is None
    assert "identical" in r.undefined_reason and "a (first matrix)" in r.undefined_reason
    json.dumps(dataclasses.asdict(r), allow_nan=False)


@pytest.mark.parametrize(
    ("case", "match"),
    [
        ("too_few", "at least 3"),
        ("zero_row", "zero norm"),
        ("parallel", "constant"),
        ("equidistant", "constant"),
    ],
)
def test_other_undefined_cases(case, match):
    rng = np.random.default_rng(9)
    a, b = rng.normal(size=(6, 5)), rng.normal(size=(6, 3))
    if case == "too_few":
        a, b = a[:2], b[:2]
    elif case == "zero_row":
        b[4] = 0.0
    elif case == "parallel":
        b = rng.uniform(0.5, 3.0, size=(6, 1)) * rng.normal(size=3)  # scaled copies of one row
    else:
        b = 2.0 * np.eye(6)  # every pair at the same angle
    r = rsa(a, b, n_permutations=0, **SAMPLE)
    assert r.spearman is None and r.p_value is None
    assert match in r.undefined_reason
    json.dumps(dataclasses.asdict(r), allow_nan=False)


def test_bad_arguments_raise():
    a = np.ones((5, 3))
    with pytest.raises(ValueError, match=r"\(5, 3\).*\(4, 3\)"):
        rsa(a, np.ones((4, 3)), n_permutations=0, **SAMPLE)
    with pytest.raises(ValueError, match="n_permutations"):
        rsa(a, a, n_permutations=-1, **SAMPLE)
    with pytest.raises(ValueError, match="max_items"):
        rsa(a, a, max_items=2, n_permutations=0, seed=0)


def test_result_is_strict_json():
    rows, book = codebook_pair(20, seed=10)
    r = rsa(rows, book, n_permutations=50, **SAMPLE)
    data = json.loads(json.dumps(dataclasses.asdict(r), allow_nan=False))
    assert set(data) == {
        "spearman",
        "p_value",
        "n_items",
        "n_total",
        "n_permutations",
        "sampled",
        "undefined_reason",
    }
