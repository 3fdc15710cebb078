"""Intervals and paired tests against independent references: scipy.stats.bootstrap,
scipy.stats.permutation_test, hand-enumerated cases and planted differences."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats as sps

from gti.evaluate.stats import (
    bootstrap_means,
    interval,
    paired_test,
    relative_gain,
    sign_flip_p,
    wilson,
)


def test_bootstrap_of_two_users_matches_the_enumerated_distribution():
    # Users with values 0 and 1: a resample's mean is 0, 0.5 or 1 with chances 1/4, 1/2, 1/4.
    reps = bootstrap_means(np.array([0.0, 1.0]), n_resamples=40_000, seed=3)
    freq = [np.mean(reps == v) for v in (0.0, 0.5, 1.0)]
    # Binomial standard error of a frequency near 1/2 over 40,000 draws is 0.0025: 5 SE.
    np.testing.assert_allclose(freq, [0.25, 0.5, 0.25], atol=0.0125)


def test_one_seed_interval_matches_scipy_percentile_bootstrap():
    rng = np.random.default_rng(0)
    hits = (rng.random(500) < 0.1).astype(float)  # a Recall@K-like 0/1 vector
    ours = interval(hits, n_resamples=20_000, seed=1)
    ref = sps.bootstrap(
        (hits,), np.mean, n_resamples=20_000, method="percentile", random_state=2
    ).confidence_interval
    # Two independent Monte Carlo quantile estimates. Bootstrap sd of the mean is
    # sqrt(.09/500) = 0.0134; the 2.5% quantile's Monte Carlo SE is
    # sqrt(.025 * .975 / 20000) / (phi(1.96) / 0.0134) = 0.00025; the means move on a
    # 1/500 grid. Allow 5 SE of the difference plus one grid step.
    tol = 5 * np.sqrt(2) * 0.00025 + 1 / 500
    assert ours.estimate == pytest.approx(hits.mean())
    assert ours.low == pytest.approx(ref.low, abs=tol)
    assert ours.high == pytest.approx(ref.high, abs=tol)
    assert (ours.n_seeds, ours.n_users, ours.n_resamples) == (1, 500, 20_000)


def test_interval_is_reproducible_from_its_seed():
    x = np.random.default_rng(1).random((3, 50))
    assert interval(x, n_resamples=1000, seed=7) == interval(x, n_resamples=1000, seed=7)
    assert interval(x, n_resamples=1000, seed=7) != interval(x, n_resamples=1000, seed=8)


def test_two_way_bootstrap_is_wider_when_seeds_disagree():
    # Same users, seeds shifted by +-0.1: the seed factor must widen the interval
    # beyond the one-seed (users only) bootstrap of the pooled mean.
    rng = np.random.default_rng(2)
    base = rng.random(400) * 0.2
    x = np.stack([base - 0.1, base, base + 0.1])
    both = interval(x, n_resamples=4000, seed=0)
    users_only = interval(x.mean(axis=0), n_resamples=4000, seed=0)
    assert both.high - both.low > 3 * (users_only.high - users_only.low)
    # Seed draw alone: the mean of 3 draws from {-.1, 0, .1} (+ the user mean) spans
    # about +-0.1 at the extremes; the 95% interval lies inside +-0.1 and beyond +-0.03.
    assert 0.03 < both.high - both.estimate < 0.1 + 1e-9


def test_sign_flip_is_exact_against_enumeration_and_scipy():
    d = np.array([0.0, 1.0, 1.0, -1.0, 1.0, 0.5, 0.0, 1.0])
    p, exact, n = sign_flip_p(d, n_resamples=10_000)
    nz = d[d != 0]
    pats = np.array(list(itertools.product((1, -1), repeat=len(nz))))
    by_hand = np.mean(np.abs(pats @ nz) >= abs(nz.sum()) - 1e-12)
    ref = sps.permutation_test(
        (d,), np.mean, permutation_type="samples", alternative="two-sided", n_resamples=np.inf
    ).pvalue
    assert exact and n == 2 ** len(nz)
    assert p == pytest.approx(by_hand)
    assert p == pytest.approx(ref)


def test_sign_flip_monte_carlo_agrees_with_scipy_on_many_users():
    rng = np.random.default_rng(4)
    d = rng.choice([-1.0, 0.0, 1.0], p=[0.1, 0.78, 0.12], size=300)
    p, exact, _ = sign_flip_p(d, n_resamples=20_000, seed=5)
    ref = sps.permutation_test(
        (d,), np.mean, permutation_type="samples", n_resamples=20_000, random_state=6
    ).pvalue
    assert not exact
    # Two Monte Carlo p-values of 20,000 draws each: SE sqrt(p(1-p)/20000) <= 0.0036.
    assert p == pytest.approx(ref, abs=5 * np.sqrt(2) * 0.0036)


def test_planted_difference_is_found_and_covered():
    # Arm A hits 8% more users than arm B on 3 seeds; the interval must cover +0.08
    # and the test reject; the same data against itself is p = 1.
    rng = np.random.default_rng(7)
    n = 900
    ease = rng.random(n)
    a = np.stack([(ease + rng.normal(0, 0.05, n) > 0.72).astype(float) for _ in range(3)])
    b = np.stack([(ease + rng.normal(0, 0.05, n) > 0.80).astype(float) for _ in range(3)])
    res = paired_test(a, b, n_resamples=5000, seed=0)
    assert res.difference.low < 0.08 < res.difference.high
    assert res.difference.estimate == pytest.approx(a.mean() - b.mean())
    assert res.p_value < 1e-3 and res.wins > res.losses
    assert len(res.per_seed) == 3
    assert paired_test(a, a, n_resamples=500).p_value == 1.0


def test_null_coverage_is_near_nominal():
    # 200 repetitions of a true difference of 0: about 95% of the intervals cover 0
    # and about 5% of the tests reject at 0.05. Binomial sd of 200 draws at 0.95 is
    # 0.015; allow 4 sd either way (and bootstrap percentile undercoverage at n=200).
    covered = rejected = 0
    for rep in range(200):
        rng = np.random.default_rng(100 + rep)
        a = (rng.random((1, 200)) < 0.3).astype(float)
        b = (rng.random((1, 200)) < 0.3).astype(float)
        res = paired_test(a, b, n_resamples=400, seed=rep)
        covered += res.difference.low <= 0 <= res.difference.high
        rejected += res.p_value < 0.05
    assert 0.95 - 4 * 0.015 <= covered / 200 <= 1.0
    assert rejected / 200 <= 0.05 + 4 * 0.015


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="NaN"):
        interval(np.array([0.0, np.nan]))
    with pytest.raises(ValueError, match="same"):
        paired_test(np.zeros((2, 5)), np.zeros((3, 5)))
    with pytest.raises(ValueError, match="level"):
        interval(np.zeros(3), level=1.5)


@pytest.mark.parametrize("hits,n", [(0, 12), (1, 12), (6, 12), (12, 12), (37, 200), (1, 1)])
@pytest.mark.parametrize("level", [0.95, 0.9])
def test_wilson_matches_scipy(hits, n, level):
    ours = wilson(hits, n, level=level)
    ref = sps.binomtest(hits, n).proportion_ci(confidence_level=level, method="wilson")
    assert ours.estimate == hits / n
    assert ours.low == pytest.approx(ref.low, abs=1e-12)
    assert ours.high == pytest.approx(ref.high, abs=1e-12)


def test_wilson_by_hand():
    # 3 of 10 at 95%: z = 1.959964, z^2 = 3.84146; centre (0.3 + z^2/20) / (1 + z^2/10)
    # = 0.49207 / 1.38415 = 0.35550; half-width z / (1 + z^2/10) * sqrt(0.021 + z^2/400)
    # = 1.41600 * 0.174939 = 0.24771; so [0.10779, 0.60321].
    s = wilson(3, 10)
    assert (round(s.low, 4), round(s.high, 4)) == (0.1078, 0.6032)
    assert wilson(0, 12).low == 0.0 and wilson(12, 12).high == 1.0  # exact, not 1e-17 off
    with pytest.raises(ValueError):
        wilson(3, 0)


def test_relative_gain_of_a_fixed_ratio_is_that_ratio_in_every_resample():
    b = np.random.default_rng(4).random((3, 40)) + 0.1
    res = relative_gain(1.5 * b, b, n_resamples=2000, seed=0)
    # Every replicate is 1.5 * mean / mean: the interval collapses to 0.5 (up to rounding).
    assert (res.estimate, res.low, res.high) == pytest.approx((0.5, 0.5, 0.5), abs=1e-12)


def test_one_seed_relative_gain_matches_scipy_paired_percentile_bootstrap():
    rng = np.random.default_rng(5)
    n = 2000
    b = (rng.random(n) < 0.1).astype(float)  # Recall-like 0/1 vectors, correlated:
    a = np.maximum(b * (rng.random(n) < 0.9), rng.random(n) < 0.07)  # A keeps most of B's hits
    ours = relative_gain(a, b, n_resamples=20_000, seed=1)
    ref = sps.bootstrap(
        (a, b),
        lambda x, y: x.mean() / y.mean() - 1,
        paired=True,
        vectorized=False,
        n_resamples=20_000,
        method="percentile",
        random_state=2,
    )
    # Two independent Monte Carlo estimates of each 2.5% quantile. Its SE is
    # sqrt(q (1 - q) / R) / f(x_q), with f the normal density of the replicates' own sd;
    # the ratio moves in steps of about 1 / (n mean(b)) (one hit more or less in A).
    sd = float(np.std(ref.bootstrap_distribution))
    se = np.sqrt(0.025 * 0.975 / 20_000) / (sps.norm.pdf(1.96) / sd)
    tol = 5 * np.sqrt(2) * se + 1 / (n * b.mean())
    assert ours.estimate == pytest.approx(a.mean() / b.mean() - 1)
    assert ours.low == pytest.approx(ref.confidence_interval.low, abs=tol)
    assert ours.high == pytest.approx(ref.confidence_interval.high, abs=tol)
    # Unpaired draws (A and B resampled apart) would be much wider: the pairing is kept.
    apart = np.percentile(
        bootstrap_means(a, n_resamples=20_000, seed=1)
        / bootstrap_means(b, n_resamples=20_000, seed=3)
        - 1,
        [2.5, 97.5],
    )
    assert ours.high - ours.low < 0.75 * (apart[1] - apart[0])


def test_relative_gain_is_undefined_without_a_positive_base():
    assert relative_gain(np.ones(5), np.zeros(5), n_resamples=100) is None
    # one user carries all of B: some resamples leave it out, and B's mean is 0 there
    assert relative_gain(np.ones(20), np.eye(1, 20).ravel(), n_resamples=500) is None
    with pytest.raises(ValueError, match="same"):
        relative_gain(np.ones((2, 5)), np.ones((3, 5)))
