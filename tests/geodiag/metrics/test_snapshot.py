"""snapshot: the cheap figures equal the full analysis' figures (same definitions), and an
independent SVD gives the same effective rank."""

from __future__ import annotations

import numpy as np
import pytest

from geodiag.metrics.geometry import summarize
from geodiag.metrics.rsa import rsa
from geodiag.metrics.snapshot import centered_effective_rank, snapshot


def svd_effective_rank(x: np.ndarray) -> float:
    """Roy & Vetterli by numpy's SVD of the centered rows: the independent reference."""
    c = x - x.mean(axis=0)
    s = np.linalg.svd(c, compute_uv=False)
    p = s[s > 0] / s.sum()
    return float(np.exp(-(p * np.log(p)).sum()))


@pytest.mark.parametrize("shape", [(40, 12), (12, 40), (300, 300)])
def test_effective_rank_matches_svd(shape):
    x = np.random.default_rng(0).normal(size=shape) * np.linspace(2, 0.01, shape[1])
    # Gram eigenvalues square the condition number: singular values lose about
    # eps * s_max^2 / s_i relative precision; the entropy of p = s / sum(s) is dominated
    # by the large ones, so 1e-9 relative is far above the rounding at these sizes.
    assert centered_effective_rank(x) == pytest.approx(svd_effective_rank(x), rel=1e-9)


def test_identical_rows_have_rank_zero():
    x = np.tile(np.random.default_rng(1).normal(size=8), (30, 1))
    assert centered_effective_rank(x) == 0.0
    snap = snapshot(x, np.random.default_rng(2).normal(size=(30, 8)))
    assert snap.effective_rank_ratio == 0.0 and snap.spread_relative == 0.0
    assert snap.mean_pairwise_cosine == pytest.approx(1.0)


def test_snapshot_equals_summarize_and_rsa():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(60, 10)) + 0.3
    ref = rng.normal(size=(60, 10)) * 2
    book = rng.normal(size=(20, 4))
    full = summarize(x, ref)
    snap = snapshot(x, ref, {"a": (x[:20], book)}, rsa_max_items=15, n_permutations=50, seed=7)
    assert snap.effective_rank_ratio == pytest.approx(full.centered.effective_rank_ratio, rel=1e-9)
    assert snap.spread_relative == pytest.approx(full.spread_relative, rel=1e-12)
    assert snap.mean_pairwise_cosine == pytest.approx(full.mean_pairwise_cosine, rel=1e-12)
    r = rsa(x[:20], book, n_permutations=50, seed=7, max_items=15)
    assert (snap.rsa["a"], snap.rsa_p["a"], snap.rsa_n_items["a"]) == (
        r.spearman,
        r.p_value,
        15,
    )


def test_snapshot_rejects_nonfinite_rows():
    x = np.ones((5, 3))
    x[1, 1] = np.nan
    with pytest.raises(ValueError, match="NaN or Inf"):
        snapshot(x, np.ones((5, 3)))


def test_untrained_rows_against_a_direct_count():
    """Movement since the first snapshot and the untrained rows, against plain numpy: rows
    0-5 moved by 1e-2, rows 6-9 moved by 1e-6 (under the tolerance), rows 10-11 not at
    all; rows 10 and 11 are also one point (an identical pair)."""
    from geodiag.metrics.snapshot import untrained

    rng = np.random.default_rng(3)
    first = rng.normal(size=(12, 8))
    first[11] = first[10] + 1e-7
    x = first.copy()
    x[:6] += 1e-2 * rng.normal(size=(6, 8))
    x[6:10] += 1e-7 * rng.normal(size=(4, 8))
    level = np.array([0] * 6 + [1] * 6)
    tol, scale = 1e-4, 2.0
    r = untrained(x, first, scale, tol, (level, ["a", "b"]))
    dist = np.linalg.norm(x - first, axis=1)
    assert r.n_unmoved == int((dist <= tol).sum()) == 6
    assert r.unmoved_by_level == {"a": 0.0, "b": 1.0}
    assert r.movement == pytest.approx(np.sqrt(np.mean(dist**2)) / scale, rel=1e-12)
    assert (r.n_identical, r.n_identical_groups) == (2, 1)
    assert r.untrained.tolist() == [False] * 6 + [True] * 6 and r.n_untrained == 6
    # The first snapshot: nothing measured as movement, the identical pair still counts.
    r0 = untrained(first, None, scale, tol)
    assert (r0.n_unmoved, r0.movement, r0.n_untrained) == (None, None, 2)
    s = snapshot(x, rng.normal(size=(20, 8)), first=first, scale=scale, tolerance=tol)
    assert s.rows is not None and s.rows.n_untrained == 6
    assert snapshot(x, rng.normal(size=(20, 8))).rows is None  # not asked
