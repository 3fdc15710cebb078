"""The initializer's-draw test and the under-trained indicators, on planted matrices, against
scipy and plain numpy references."""

import numpy as np
import pytest
from scipy import special

from geodiag.metrics.indicators import (
    ISOTROPY_ALPHA,
    MAX_VOCABULARY_ABOVE,
    UNUSED_QUANTILE,
    around_mean_p,
    at_initializer_p,
    beta_cdf,
    beta_sf,
    draw_kind,
    gamma_p,
    indicator_cut,
    isotropy,
    principal_directions,
    rank_among,
    unused_cosine,
    unused_mean,
)

D = 64


@pytest.mark.parametrize(
    "a,b,x",
    [
        (0.5, 0.5, 0.3),
        (3, 4, 0.9),
        (8, 280, 0.02),
        (8, 280, 0.2),
        (120, 6000, 0.03),
        (2e4, 7e5, 0.027),
    ],
)
def test_incomplete_beta_matches_scipy(a, b, x):
    assert beta_cdf(x, a, b) == pytest.approx(special.betainc(a, b, x), rel=1e-7, abs=1e-300)
    assert beta_sf(x, a, b) == pytest.approx(special.betaincc(a, b, x), rel=1e-7, abs=1e-300)


@pytest.mark.parametrize(
    "a,x", [(0.5, 0.1), (3, 10), (5, 2), (1000, 990), (1e5, 1.01e5), (2e5, 1.98e5)]
)
def test_incomplete_gamma_matches_scipy(a, x):
    assert gamma_p(a, x) == pytest.approx(special.gammainc(a, x), rel=1e-9, abs=1e-15)


def vocabulary(n=2000, seed=0):
    """Anisotropic rows with a common offset: a few strong directions, like real embeddings."""
    rng = np.random.default_rng(seed)
    scales = np.geomspace(1.0, 0.05, D)
    basis, _ = np.linalg.qr(rng.normal(size=(D, D)))
    return (rng.normal(size=(n, D)) * scales) @ basis.T + 0.3


def test_isotropy_p_values_are_uniform_for_draws_and_tiny_for_trained_rows():
    vocab = vocabulary()
    v = principal_directions(vocab, 8)
    rng = np.random.default_rng(1)
    draws = [isotropy(rng.normal(3.0, 0.7, size=(6, D)), v).p_value for _ in range(2000)]
    # Exact null: the rejection rate is the level, within binomial noise (sd 0.22%).
    assert abs(np.mean(np.array(draws) < ISOTROPY_ALPHA) - ISOTROPY_ALPHA) < 0.006
    trained = [isotropy(vocab[rng.choice(len(vocab), 6)], v).p_value for _ in range(300)]
    assert np.mean(np.array(trained) >= ISOTROPY_ALPHA) < 0.01


def test_isotropy_share_is_the_energy_fraction_in_the_directions():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(10, D))
    v = np.eye(D)[:, :3]  # the first three coordinates
    c = x - x.mean(0)
    assert isotropy(x, v).share == pytest.approx((c[:, :3] ** 2).sum() / (c**2).sum())
    assert isotropy(x[:1], v) is None
    assert isotropy(np.ones((5, D)), v) is None  # one point: no energy


def test_at_initializer_and_around_mean_against_scipy():
    from scipy import stats

    rng = np.random.default_rng(3)
    x = rng.normal(0, 0.02, size=(12, D))
    s = (x**2).sum() / 0.02**2
    two_sided = 2 * min(stats.chi2.cdf(s, x.size), stats.chi2.sf(s, x.size))
    assert at_initializer_p(x, 0.02) == pytest.approx(two_sided, rel=1e-8)
    mu = rng.normal(size=D)
    y = mu + rng.normal(0, 0.1, size=(12, D))
    xbar = y.mean(0)
    pooled = ((y - xbar) ** 2).sum() / (11 * D)
    f = 12 * ((xbar - mu) ** 2).sum() / D / pooled
    assert around_mean_p(y, mu) == pytest.approx(stats.f.sf(f, D, 11 * D), rel=1e-8)


def test_draw_kinds_of_planted_rows():
    vocab = vocabulary()
    v = principal_directions(vocab, 8)
    mean, spread = vocab.mean(0), float(np.sqrt(((vocab - vocab.mean(0)) ** 2).sum(1).mean()))
    rng = np.random.default_rng(4)

    def kind(rows, sigma=0.02):
        return draw_kind(rows, v, mean, spread, sigma).kind

    assert kind(rng.normal(0, 0.02, size=(16, D))) == "initializer"
    assert kind(mean + rng.normal(0, 0.05 * spread / np.sqrt(D), size=(16, D))) == "noise"
    # gti's random init: N(0, the vocabulary's entry std): a draw of no explained scale
    assert kind(rng.normal(0, vocab.std(), size=(16, D))) == "isotropic"
    assert kind(vocab[rng.choice(len(vocab), 16)]) is None  # trained rows: anisotropic
    assert draw_kind(rng.normal(size=(3, D)), v, mean, spread, 0.02) is None  # too few


def magikarp_reference(mat, unused):
    """Land & Bartolo's cosine without the first PC, written out from their description:
    PCA of the whole (centered) matrix, the uncentered projection removed from each row."""
    c = mat - mat.mean(0)
    pc = np.linalg.svd(c, full_matrices=False)[2][0]
    wo = mat - np.outer(mat @ pc, pc)
    m = wo[unused].mean(0)
    return wo @ m / np.linalg.norm(wo, axis=1) / np.linalg.norm(m), pc


def test_unused_cosine_matches_the_papers_indicator():
    rng = np.random.default_rng(5)
    vocab = vocabulary(1500)
    common = rng.normal(size=D)
    unused = common + rng.normal(0, 0.05, size=(40, D))  # never trained: one direction
    mat = np.concatenate([vocab, unused])
    ids = np.arange(1500, 1540)
    expected, pc = magikarp_reference(mat, ids)
    ref = unused_mean(mat[ids], pc)
    np.testing.assert_allclose(unused_cosine(mat, ref), expected, rtol=1e-10)
    # leave-one-out: each unused row against the mean of the other 39
    wo = mat[ids] - np.outer(mat[ids] @ pc, pc)
    for i in (0, 17):
        others = np.delete(wo, i, axis=0).mean(0)
        loo = wo[i] @ others / np.linalg.norm(wo[i]) / np.linalg.norm(others)
        assert ref.own[i] == pytest.approx(loo, rel=1e-10)
    assert np.median(ref.own) > 0.95 and np.median(expected[:1500]) < 0.5


def test_indicator_cut_and_rank():
    own = np.linspace(0.5, 1.0, 101)
    cut = indicator_cut(own, np.linspace(0.0, 0.5, 1000))
    assert cut.value == pytest.approx(np.quantile(own, UNUSED_QUANTILE))
    assert cut.vocabulary_above == 0 and cut.judged
    loose = indicator_cut(own, np.linspace(0.0, 1.0, 1000))
    assert loose.vocabulary_above > MAX_VOCABULARY_ABOVE and not loose.judged
    ranks = rank_among(np.array([2.0, 0.5, -1.0]), np.array([0.0, 0.5, 1.0, 1.5]))
    np.testing.assert_allclose(ranks, [0.0, 0.75, 1.0])  # share scoring at least as high


@pytest.mark.parametrize("n", [40, 500])
def test_principal_directions_are_the_svds(n):
    x = vocabulary(n)
    vt = np.linalg.svd(x - x.mean(0), full_matrices=False)[2]
    v = principal_directions(x, 5)
    np.testing.assert_allclose(np.abs(np.sum(v * vt[:5].T, axis=0)), 1.0, atol=1e-8)


@pytest.mark.parametrize("rank", [None, 3])
def test_principal_directions_of_a_wide_matrix_are_the_svds(rank):
    """Fewer rows than dims, more than a few dozen: the directions come from the rows' Gram
    matrix (the gate fits 512 sampled rows x 1,024), the SVD's up to sign; with rank
    below k the SVD completes the basis as before."""
    rng = np.random.default_rng(3)
    n, d = 200, 256
    x = rng.normal(size=(n, d)) * np.geomspace(1.0, 0.05, d) + 0.3
    if rank is not None:  # the centered rows span only `rank` directions
        x = rng.normal(size=(n, rank)) @ rng.normal(size=(rank, d)) + 0.3
    vt = np.linalg.svd(x - x.mean(0), full_matrices=False)[2]
    v = principal_directions(x, 5)
    np.testing.assert_allclose(v.T @ v, np.eye(5), atol=1e-10)
    top = 5 if rank is None else rank  # beyond the rank the basis is arbitrary
    np.testing.assert_allclose(np.abs(np.sum(v[:, :top] * vt[:top].T, axis=0)), 1.0, atol=1e-8)
