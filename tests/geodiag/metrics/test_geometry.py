"""geometry: each metric against an independent numpy/scipy computation, and planted
geometries whose answer is known in advance (rank-k, one point, one point + noise, a line)."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import scipy.stats

from geodiag.metrics import cosine, geometry
from geodiag.metrics.cosine import cosine_matrix, level_cosine
from geodiag.metrics.geometry import (
    centered,
    mean_pairwise_cosine,
    spread,
    summarize,
)


def strict_json(result: object) -> str:
    return json.dumps(dataclasses.asdict(result), allow_nan=False)


def explicit_cosines(x: np.ndarray) -> np.ndarray:
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    return u @ u.T


def orthonormal(n: int, k: int, seed: int) -> np.ndarray:
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(n, k)))
    return q  # (n, k), orthonormal columns


@pytest.mark.parametrize("shape", [(40, 12), (12, 40), (1, 5), (5, 1)])
def test_spectrum_matches_explicit_svd_and_entropy(shape):
    x = np.random.default_rng(0).normal(size=shape) + 0.3
    st = summarize(x).uncentered
    s = np.linalg.svd(x, compute_uv=False)
    np.testing.assert_allclose(st.singular_values, s, rtol=1e-12)
    assert len(st.singular_values) == min(shape)
    assert st.effective_rank == pytest.approx(np.exp(scipy.stats.entropy(s)), rel=1e-12)
    assert st.effective_rank_ratio == pytest.approx(st.effective_rank / min(shape), rel=1e-12)
    assert st.stable_rank == pytest.approx((s**2).sum() / s.max() ** 2, rel=1e-12)
    assert st.participation_ratio == pytest.approx((s**2).sum() ** 2 / (s**4).sum(), rel=1e-12)
    assert st.top1_energy_share == pytest.approx(s.max() ** 2 / (s**2).sum(), rel=1e-12)
    assert (st.n_rows, st.dim, st.undefined_reason) == (*shape, None)


def test_spectrum_hand_computed_2x2():
    # s = (4, 3): p = (4/7, 3/7); stable rank 25/16; participation ratio 625/337.
    st = summarize(np.array([[3.0, 0.0], [0.0, 4.0]])).uncentered
    assert st.singular_values == pytest.approx([4.0, 3.0], abs=1e-15)
    h = -(4 / 7) * math.log(4 / 7) - (3 / 7) * math.log(3 / 7)
    assert st.effective_rank == pytest.approx(math.exp(h), rel=1e-14)
    assert st.effective_rank == pytest.approx(1.9796263300525183, rel=1e-12)  # golden
    assert st.effective_rank_ratio == pytest.approx(1.9796263300525183 / 2, rel=1e-12)
    assert st.stable_rank == pytest.approx(25 / 16, rel=1e-14)
    assert st.participation_ratio == pytest.approx(625 / 337, rel=1e-14)
    assert st.top1_energy_share == pytest.approx(16 / 25, rel=1e-14)


@pytest.mark.parametrize("k", [1, 3, 5])
def test_rank_k_equal_directions_give_rank_exactly_k(k):
    x = 2.5 * orthonormal(30, k, seed=1) @ orthonormal(20, k, seed=2).T  # (30, 20), rank k
    st = summarize(x).uncentered
    s = np.array(st.singular_values)
    assert np.all(s[:k] > 1.0)
    assert np.all(s[k:] < 1e-12 * s[0])
    assert st.effective_rank == pytest.approx(k, rel=1e-9)
    assert st.stable_rank == pytest.approx(k, rel=1e-12)
    assert st.participation_ratio == pytest.approx(k, rel=1e-12)
    assert st.top1_energy_share == pytest.approx(1 / k, rel=1e-12)


def test_rank_k_unequal_scales_has_exactly_k_nonzero_values():
    scales = np.array([5.0, 2.0, 0.5])
    x = orthonormal(50, 3, seed=3) * scales @ orthonormal(16, 3, seed=4).T
    s = np.array(summarize(x).uncentered.singular_values)
    np.testing.assert_allclose(s[:3], scales, rtol=1e-12)
    assert np.all(s[3:] < 1e-12)


def test_svd_and_gram_routes_agree():
    rng = np.random.default_rng(5)
    full = rng.normal(size=(300, 40)) * np.linspace(3.0, 0.1, 40)
    low = rng.normal(size=(300, 4)) @ rng.normal(size=(4, 40))
    for x in (full, full.T, low, low.T):
        svd = geometry._singular_values_svd(x)
        gram = geometry.singular_values_by_gram(x)
        assert svd.shape == gram.shape == (40,)
        np.testing.assert_allclose(gram, svd, rtol=1e-9, atol=1e-6 * svd[0])
    # The Gram route sets its rounding floor to exact zeros: a rank-4 matrix stays rank 4.
    assert np.count_nonzero(geometry.singular_values_by_gram(low)) == 4


def test_gram_route_is_used_for_large_matrices(monkeypatch):
    x = np.random.default_rng(6).normal(size=(200, 100))
    exact = summarize(x).uncentered
    monkeypatch.setattr(geometry, "_SVD_MAX_ELEMENTS", 1000)
    monkeypatch.setattr(geometry, "_SVD_SMALL_SIDE", 4)
    monkeypatch.setattr(geometry, "_singular_values_svd", None)  # fails if called
    via_gram = summarize(x).uncentered
    assert via_gram.effective_rank == pytest.approx(exact.effective_rank, rel=1e-10)
    assert via_gram.stable_rank == pytest.approx(exact.stable_rank, rel=1e-10)


def test_gram_route_survives_extreme_scales():
    x = np.random.default_rng(7).normal(size=(50, 10))
    ref = geometry._singular_values_svd(x)
    for scale in (1e-200, 1e200):
        np.testing.assert_allclose(
            geometry.singular_values_by_gram(x * scale) / scale, ref, rtol=1e-9
        )


def test_identical_rows_center_to_rank_zero():
    rng = np.random.default_rng(8)
    point = rng.normal(size=24) / 3  # values whose float mean over 7 copies can miss by an ulp
    x = np.tile(point, (7, 1))
    assert np.any(x - x.mean(axis=0))  # the plain float mean misses the point by an ulp
    c = centered(x)
    assert not np.any(c)
    st = summarize(c).uncentered
    assert st.undefined_reason is not None and "rank 0" in st.undefined_reason
    assert st.singular_values == [0.0] * 7
    assert (st.effective_rank, st.effective_rank_ratio, st.stable_rank, st.participation_ratio) == (
        0,
        0,
        0,
        0,
    )
    assert st.top1_energy_share is None

    reference = rng.normal(size=(50, 24))
    g = summarize(x, reference)
    assert g.centered.undefined_reason is not None
    assert g.uncentered.effective_rank == pytest.approx(1.0)
    assert g.uncentered.top1_energy_share == pytest.approx(1.0)
    assert g.spread == 0.0 and g.spread_relative == 0.0
    assert g.mean_pairwise_cosine == pytest.approx(1.0, abs=1e-12)
    strict_json(g)


def test_mean_plus_tiny_noise_is_full_rank_but_collapsed_in_scale():
    rng = np.random.default_rng(9)
    reference = rng.normal(size=(200, 32))  # unit-scale "vocabulary"
    x = reference.mean(axis=0) + 0.5 + 1e-6 * rng.normal(size=(100, 32))
    g = summarize(x, reference)
    assert g.centered.effective_rank_ratio > 0.8  # the noise is full-rank
    assert g.spread_relative is not None and g.spread_relative < 1e-5
    assert g.mean_pairwise_cosine > 0.999
    assert g.uncentered.top1_energy_share > 0.999


def test_rows_on_a_line_have_centered_rank_one():
    rng = np.random.default_rng(10)
    t = rng.normal(size=(60, 1))
    x = rng.normal(size=16) + t * rng.normal(size=16)  # (60, 16) on one line
    g = summarize(x, rng.normal(size=(60, 16)))
    assert g.centered.effective_rank == pytest.approx(1.0, abs=1e-6)
    assert g.centered.stable_rank == pytest.approx(1.0, abs=1e-12)
    assert g.uncentered.effective_rank > 1.1


def test_centered_spread_and_norms_match_explicit():
    x = np.random.default_rng(11).normal(size=(25, 6)) * 2 + 1
    c = centered(x)
    np.testing.assert_allclose(c, x - x.mean(axis=0), atol=1e-14)
    d = np.linalg.norm(x - x.mean(axis=0), axis=1)
    assert spread(x) == pytest.approx(np.sqrt(np.mean(d**2)), rel=1e-13)
    norms = np.linalg.norm(x, axis=1)
    ns = summarize(x).row_norms
    assert (ns.mean, ns.std, ns.min, ns.median, ns.max) == pytest.approx(
        (norms.mean(), norms.std(), norms.min(), np.median(norms), norms.max()), rel=1e-13
    )
    strict_json(ns)


def test_mean_pairwise_cosine_matches_explicit_matrix():
    x = np.random.default_rng(12).normal(size=(37, 9)) + 0.4
    cos = explicit_cosines(x)
    expected = cos[~np.eye(37, dtype=bool)].mean()
    assert mean_pairwise_cosine(x) == pytest.approx(expected, abs=1e-13)


def test_mean_pairwise_cosine_undefined_cases():
    assert mean_pairwise_cosine(np.ones((1, 4))) is None
    x = np.random.default_rng(13).normal(size=(5, 4))
    x[2] = 0.0
    assert mean_pairwise_cosine(x) is None


def test_cosine_matrix_matches_explicit_and_marks_zero_rows():
    x = np.random.default_rng(14).normal(size=(8, 5))
    np.testing.assert_allclose(cosine_matrix(x), explicit_cosines(x), atol=1e-14)
    assert np.all(np.diag(cosine_matrix(x)) == 1.0)
    x[3] = 0.0
    c = cosine_matrix(x)
    assert np.isnan(c[3]).all() and np.isnan(c[:, 3]).all()
    assert np.isfinite(np.delete(np.delete(c, 3, 0), 3, 1)).all()


def brute_level_cosine(x: np.ndarray, index: np.ndarray, n_levels: int):
    cos = explicit_cosines(x)
    off = ~np.eye(len(x), dtype=bool)
    same = index[:, None] == index[None, :]
    matrix = [[None] * n_levels for _ in range(n_levels)]
    for a in range(n_levels):
        for b in range(n_levels):
            mask = (index[:, None] == a) & (index[None, :] == b) & off
            if mask.any():
                matrix[a][b] = cos[mask].mean()
    within = cos[same & off].mean() if (same & off).any() else None
    between = cos[~same].mean() if (~same).any() else None
    return matrix, within, between


def test_level_cosine_matches_brute_force():
    rng = np.random.default_rng(15)
    index = rng.integers(0, 4, size=50)
    index[:2] = [3, 3]
    index[index == 1] = 0  # level 1 empty
    index[10] = 1  # ... but for one token: a level of size 1
    x = rng.normal(size=(50, 7)) + 0.2
    names = ["a", "b", "c", "d"]
    lc = level_cosine(x, index, names)
    matrix, within, between = brute_level_cosine(x, index, 4)
    assert lc.level_names == names
    assert lc.sizes == np.bincount(index, minlength=4).tolist()
    assert lc.matrix[1][1] is None
    for a in range(4):
        for b in range(4):
            if matrix[a][b] is None:
                assert lc.matrix[a][b] is None
            else:
                assert lc.matrix[a][b] == pytest.approx(matrix[a][b], abs=1e-13)
    assert lc.within_mean == pytest.approx(within, abs=1e-13)
    assert lc.between_mean == pytest.approx(between, abs=1e-13)
    assert lc.undefined_reason is None
    strict_json(lc)


def test_level_cosine_with_many_levels_sums_in_chunks(monkeypatch):
    """Above _INDICATOR_MAX_LEVELS (a cosine map's blocks) the level sums come a chunk of
    rows at a time, with no (L, n) indicator: same figures as the brute force."""
    rng = np.random.default_rng(17)
    n_levels = cosine._INDICATOR_MAX_LEVELS + 9
    index = rng.integers(0, n_levels, size=120)
    index[index == 3] = 4  # an empty level
    x = rng.normal(size=(120, 9)) + 0.3
    monkeypatch.setattr(cosine, "_SUM_CHUNK_ROWS", 16)  # runs that cross chunks
    names = [str(i) for i in range(n_levels)]
    lc = level_cosine(x, index, names)
    matrix, within, between = brute_level_cosine(x, index, n_levels)
    for a in range(n_levels):
        for b in range(n_levels):
            if matrix[a][b] is None:
                assert lc.matrix[a][b] is None
            else:
                assert lc.matrix[a][b] == pytest.approx(matrix[a][b], abs=1e-13)
    assert lc.within_mean == pytest.approx(within, abs=1e-13)
    assert lc.between_mean == pytest.approx(between, abs=1e-13)


def test_block_structured_levels_have_within_above_between():
    rng = np.random.default_rng(16)
    centers = rng.normal(size=(3, 32))
    index = np.repeat(np.arange(3), 20)
    x = centers[index] + 0.3 * rng.normal(size=(60, 32))
    lc = level_cosine(x, index, ["a", "b", "c"])
    assert lc.within_mean > 0.8
    assert abs(lc.between_mean) < 0.4
    for a in range(3):
        assert all(lc.matrix[a][a] > lc.matrix[a][b] for b in range(3) if b != a)


def test_level_cosine_single_level_and_bad_input():
    x = np.random.default_rng(17).normal(size=(6, 3))
    lc = level_cosine(x, np.zeros(6, dtype=int), ["only"])
    assert lc.between_mean is None and lc.within_mean is not None
    with pytest.raises(ValueError, match="level_index"):
        level_cosine(x, np.array([0, 1, 2, 0, 1, 5]), ["a", "b", "c"])
    with pytest.raises(ValueError, match="shape"):
        level_cosine(x, np.zeros(5, dtype=int), ["a"])
    x[0] = 0.0
    lc = level_cosine(x, np.zeros(6, dtype=int), ["only"])
    assert lc.undefined_reason is not None and lc.within_mean is None
    strict_json(lc)


def test_summarize_fields_and_reference():
    rng = np.random.default_rng(18)
    x = rng.normal(size=(40, 8))
    reference = 2 * rng.normal(size=(40, 8))
    g = summarize(x, reference)
    assert (g.n_tokens, g.dim) == (40, 8)
    assert g.spread_relative == pytest.approx(spread(x) / spread(reference), rel=1e-13)
    assert g.mean_pairwise_cosine == pytest.approx(mean_pairwise_cosine(x), abs=1e-15)
    assert summarize(x).spread_relative is None
    assert summarize(x, np.tile(reference[0], (5, 1))).spread_relative is None  # reference spread 0
    strict_json(g)


@pytest.mark.parametrize("route", ["svd", "gram, d <= n", "gram, n < d"])
def test_summarize_without_the_uncentered_spectrum_keeps_every_other_figure(monkeypatch, route):
    """uncentered=False (the gate's measure): one eigensolve fewer on the Gram route, no
    uncentered SVD on the small one, and every other figure the same bits."""
    rng = np.random.default_rng(19)
    x = rng.normal(size=(120, 30)) * np.linspace(2.0, 0.1, 30) + 5.0  # a large common mean
    if route == "gram, n < d":
        x = x.T.copy()
    reference = rng.normal(size=(50, x.shape[1]))
    if route != "svd":
        monkeypatch.setattr(geometry, "_SVD_MAX_ELEMENTS", 100)
        monkeypatch.setattr(geometry, "_SVD_SMALL_SIDE", 4)
    solves = []
    for name in ("_sv_from_gram", "_singular_values_svd"):
        real = getattr(geometry, name)
        monkeypatch.setattr(
            geometry, name, lambda a, real=real, name=name: solves.append(name) or real(a)
        )
    full = summarize(x, reference)
    n_full = len(solves)
    part = summarize(x, reference, uncentered=False)
    assert (n_full, len(solves) - n_full) == (2, 1)
    assert part.uncentered is None and full.uncentered is not None
    assert part == dataclasses.replace(full, uncentered=None)  # exact equality, every field
    strict_json(part)


def test_invalid_input_is_named():
    with pytest.raises(ValueError, match="2-D"):
        summarize(np.ones(4))
    with pytest.raises(ValueError, match="NaN or Inf"):
        summarize(np.array([[1.0, np.nan], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="at least 1 row"):
        summarize(np.ones((0, 3)))
    with pytest.raises(ValueError, match="dims must match"):
        summarize(np.ones((3, 3)), np.ones((3, 4)))


@pytest.mark.parametrize("shape", [(420, 100), (100, 420)])
def test_summarize_gram_route_matches_direct_svd_even_for_tiny_spread(shape, monkeypatch):
    """summarize() derives both spectra from one Gram product of the centered rows above
    the SVD size limit. The centered spectrum keeps full precision even for mean + 1e-6
    noise (no cancellation). The uncentered one cannot resolve singular values below
    ~sqrt(k * eps) of the largest (a property of any Gram route): here the noise tail sits
    at ~1e-7 of the mean's singular value, so it reads 0 and the effective rank moves <1e-3."""
    monkeypatch.setattr(geometry, "_SVD_MAX_ELEMENTS", 10_000)  # small shapes, same route
    assert geometry._use_gram(shape)
    rng = np.random.default_rng(7)
    mean = rng.normal(size=shape[1]) * 3.0
    x = mean + rng.normal(size=shape) * 1e-6
    got = geometry.summarize(x)

    def erank(s):
        p = s[s > 0] / s.sum()
        return np.exp(-(p * np.log(p)).sum())

    s_c = np.linalg.svd(x - x.mean(axis=0), compute_uv=False)
    np.testing.assert_allclose(got.centered.singular_values, s_c, rtol=1e-6, atol=1e-7 * s_c[0])
    np.testing.assert_allclose(got.centered.effective_rank, erank(s_c), rtol=1e-7)
    s_x = np.linalg.svd(x, compute_uv=False)
    np.testing.assert_allclose(got.uncentered.singular_values[0], s_x[0], rtol=1e-12)
    np.testing.assert_allclose(got.uncentered.effective_rank, erank(s_x), rtol=1e-3)
    # A well-conditioned matrix is resolved completely on the Gram route.
    y = rng.normal(size=shape) + 0.5
    got_y = geometry.summarize(y)
    np.testing.assert_allclose(
        got_y.uncentered.singular_values, np.linalg.svd(y, compute_uv=False), rtol=1e-8
    )


@pytest.mark.parametrize("n", [1, 2, 3, 4, 101, 1000])
def test_median_is_numpy_median_bit_for_bit(n):
    rng = np.random.default_rng(n)
    for scale in (1e-300, 1e-3, 1.0, 1e300):  # tiny to huge values
        r = rng.random(n) * scale
        assert geometry._median(r) == float(np.median(r))
    r = np.ones(n)
    r[-1] = np.nan
    assert math.isnan(geometry._median(r))


def test_summarize_sums_the_centered_gram_over_row_blocks(monkeypatch):
    """On the Gram route the centered rows come a block at a time (no (n, d) copy): the
    spectra and the spread agree with one block to float rounding."""
    rng = np.random.default_rng(9)
    x = rng.normal(size=(300, 40)) * np.linspace(2.0, 0.1, 40) + 1.5
    monkeypatch.setattr(geometry, "_SVD_MAX_ELEMENTS", 1000)
    one = geometry.summarize(x)
    monkeypatch.setattr(geometry, "_GRAM_BLOCK_ROWS", 7)
    blocks = geometry.summarize(x)
    for a, b in ((one.centered, blocks.centered), (one.uncentered, blocks.uncentered)):
        np.testing.assert_allclose(b.singular_values, a.singular_values, rtol=1e-12)
    assert blocks.spread == pytest.approx(one.spread, rel=1e-13)
    assert geometry.spread(x) == pytest.approx(
        np.sqrt(((x - x.mean(axis=0)) ** 2).sum(axis=1).mean()), rel=1e-13
    )


@pytest.mark.parametrize("n_levels", [3, 40])  # the indicator product, and the chunked sums
def test_level_cosine_with_a_center_equals_it_on_the_centered_rows(n_levels):
    """``center`` gives the cosines of x - center without the (n, d) copy; rows a hair
    from the center (1e-9 noise) keep their direction (the center is taken off first)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 12)) + 5.0
    center = x.mean(axis=0)
    x[:10] = center + 1e-9 * rng.normal(size=(10, 12))
    index = rng.integers(0, n_levels, size=300)
    names = [str(i) for i in range(n_levels)]
    got = level_cosine(x, index, names, center=center)
    want = level_cosine(x - center, index, names)
    flat = [v for row in got.matrix for v in row]
    ref = [v for row in want.matrix for v in row]
    assert [v is None for v in flat] == [v is None for v in ref]
    # Summation order differs (reduceat against a BLAS product): each sum of n = 300 unit
    # vectors moves by ~n * 2^-52 = 7e-14; 1e-12 leaves room and no more.
    np.testing.assert_allclose(
        [v for v in flat if v is not None], [v for v in ref if v is not None], rtol=0, atol=1e-12
    )
    assert got.within_mean == pytest.approx(want.within_mean, abs=1e-12)
