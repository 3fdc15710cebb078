"""The block sample of a vocabulary (geodiag.metrics.vocabulary_sample), against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from geodiag.metrics.vocabulary_sample import BlockFigures, cluster_se, sample_blocks


def test_one_block_per_stratum_seeded():
    spans = sample_blocks(100_003, 2_000, 20, seed=7)
    assert spans == sample_blocks(100_003, 2_000, 20, seed=7)
    assert spans != sample_blocks(100_003, 2_000, 20, seed=8)
    assert len(spans) == 20 and all(b - a == 100 for a, b in spans)
    edges = (np.arange(21) * 100_003) // 20
    for (a, b), lo, hi in zip(spans, edges[:-1], edges[1:], strict=True):
        assert lo <= a and b <= hi


def test_a_vocabulary_no_larger_than_the_sample_is_read_whole():
    assert sample_blocks(2_000, 2_000, 20, seed=0) == [(0, 2_000)]


def test_cluster_se_is_the_sd_over_root_k_with_the_fpc():
    v = np.array([1.0, 2.0, 4.0, 7.0])
    expected = np.std(v, ddof=1) / 2 * np.sqrt(1 - 400 / 1000)
    assert cluster_se(v, 400, 1000) == pytest.approx(expected, rel=1e-12)
    assert cluster_se(v[:1], 100, 1000) == 0.0


def test_block_figures_match_numpy_with_a_large_common_mean_and_a_nan_row():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5_000, 8)) * 0.01 + 100.0  # spread 0.028 beside norms of 283
    spans = sample_blocks(len(x), 1_000, 10, seed=1)
    x[spans[3][0] + 5] = np.nan  # read, counted, left out
    acc = BlockFigures(spans)
    for a, b in spans:  # pieces of at most 64 rows, as the walk reads them
        for s in range(a, b, 64):
            acc.add(np.arange(s, min(s + 64, b)), x[s : min(s + 64, b)])
    res = acc.result(len(x), seed=1)
    blocks = [x[a:b][np.isfinite(x[a:b]).all(axis=1)] for a, b in spans]
    read = np.concatenate(blocks)
    center = read.mean(axis=0)
    per = [np.sqrt(((blk - center) ** 2).sum(axis=1).mean()) for blk in blocks]
    assert res.n_read == 1_000 and res.n_rows == 5_000 and res.blocks == spans
    assert res.spread == pytest.approx(np.sqrt(((read - center) ** 2).sum(axis=1).mean()), rel=1e-9)
    assert res.spread_se == pytest.approx(cluster_se(np.array(per), 1_000, 5_000), rel=1e-7)
    assert res.mean_norm == pytest.approx(np.linalg.norm(read, axis=1).mean(), rel=1e-12)
