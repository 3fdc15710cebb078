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
    assert snap.effective_rank_ratio == 0.0 and snap.spread_ratio == 0.0
    assert snap.mean_cosine == pytest.approx(1.0)


def test_snapshot_equals_summarize_and_rsa():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(60, 10)) + 0.3
    ref = rng.normal(size=(60, 10)) * 2
    book = rng.normal(size=(20, 4))
    full = summarize(x, ref)
    snap = snapshot(x, ref, {"a": (x[:20], book)}, rsa_max_items=15, n_permutations=50, seed=7)
    assert snap.effective_rank_ratio == pytest.approx(full.centered.effective_rank_ratio, rel=1e-9)
    assert snap.spread_ratio == pytest.approx(full.spread_relative, rel=1e-12)
    assert snap.mean_cosine == pytest.approx(full.mean_pairwise_cosine, rel=1e-12)
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
