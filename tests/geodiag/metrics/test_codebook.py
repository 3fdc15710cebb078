"""Codebook health against independent references: scipy's entropy, a Counter of tuples."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from scipy.stats import entropy

from geodiag.metrics.codebook import codebook_health


def test_usage_and_collisions_equal_scipy_and_a_counter():
    rng = np.random.default_rng(0)
    sizes = [16, 8, 4]
    # Skewed usage with codes left unused at every level, and some items sharing a tuple.
    codes = np.stack([rng.zipf(1.6, size=300) % (s - 2) for s in sizes], axis=1)
    items = {f"item{i}": [int(c) for c in row] for i, row in enumerate(codes)}
    h = codebook_health(items, ["a", "b", "c"], sizes)
    assert h.n_items == 300
    for li, (lv, size) in enumerate(zip(h.levels, sizes, strict=True)):
        counts = np.bincount(codes[:, li], minlength=size)
        assert lv.n_used == int((counts > 0).sum()) and lv.utilization == lv.n_used / size
        assert lv.dead_codes == np.flatnonzero(counts == 0).tolist() and lv.n_dead == 2
        assert lv.perplexity == pytest.approx(np.exp(entropy(counts)), rel=1e-12)
        assert lv.normalized_entropy == pytest.approx(entropy(counts) / np.log(size), rel=1e-12)
        assert lv.max_code_share == counts.max() / 300
    tuples = Counter(map(tuple, codes.tolist()))
    shared = {t: k for t, k in tuples.items() if k > 1}
    assert h.n_colliding_tuples == len(shared)
    assert h.n_colliding_items == sum(shared.values())
    assert h.max_items_per_tuple == max(tuples.values())
    top = h.collisions[0]
    assert tuple(top.codes) in shared and top.size == max(shared.values())
    assert all(items[name] == top.codes for name in top.items)


def test_uniform_use_and_no_items():
    items = {f"i{k}": [k % 4, k // 4] for k in range(8)}
    h = codebook_health(items, ["a", "b"], [4, 2])
    assert [lv.perplexity for lv in h.levels] == pytest.approx([4.0, 2.0])
    assert [lv.normalized_entropy for lv in h.levels] == pytest.approx([1.0, 1.0])
    assert h.n_colliding_items == 0 and h.collisions == []
    empty = codebook_health({}, ["a"], [3])
    assert empty.levels[0].n_dead == 3 and empty.levels[0].perplexity == 1.0
