"""RSA intervals over seeds and codes (gti.study.geometry_intervals).

The replicate statistic is computed from multiplicities, without building the
resampled matrices; here it is checked against scipy.stats.spearmanr on the
explicitly expanded sample, the full-sample value against geodiag's rsa(), and the
intervals on planted structure and on null data.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import rankdata, spearmanr

from geodiag.metrics.rsa import dissimilarity, rsa
from gti.study.geometry_intervals import (
    Bootstrap,
    Cell,
    code_weights,
    sort_pairs,
    summarize_cells,
    to_markdown,
    weighted_ranks,
    weighted_spearman,
)

# rsa()'s sample settings have no defaults (callers pass them; AnalyzeOptions holds
# geodiag's): the tests use geodiag's.
SAMPLE = dict(seed=0, max_items=1000)


def triangle(x: np.ndarray) -> np.ndarray:
    rows, cols = np.triu_indices(len(x), k=1)
    return dissimilarity(x)[rows, cols]


def expanded_spearman(x: np.ndarray, book: np.ndarray, draw: np.ndarray) -> float:
    """The replicate built the slow way: resampled rows, every pair of positions except
    those holding two copies of one code, scipy's Spearman."""
    dx, db = dissimilarity(x[draw]), dissimilarity(book[draw])
    p, q = np.triu_indices(len(draw), k=1)
    keep = draw[p] != draw[q]
    return spearmanr(dx[p, q][keep], db[p, q][keep]).statistic


@pytest.mark.parametrize("case", range(6))
def test_replicate_equals_scipy_on_the_expanded_sample(case):
    rng = np.random.default_rng(case)
    n = 15
    x = rng.normal(size=(n, 6))
    book = rng.normal(size=(n, 4))
    if case % 2:  # planted ties: two identical codebook vectors, rows 3 and 7 identical
        book[5] = book[2]
        x[7] = x[3]
    draw = rng.integers(0, n, size=n)
    rows, cols = np.triu_indices(n, k=1)
    w = code_weights(draw, n, rows, cols)
    got = weighted_spearman(
        weighted_ranks(sort_pairs(triangle(x)), w), weighted_ranks(sort_pairs(triangle(book)), w), w
    )
    # float64 sums of at most ~10^2 ranks below 10^3: agreement to ~1e-13
    assert got == pytest.approx(expanded_spearman(x, book, draw), abs=1e-12)


def test_weighted_ranks_are_rankdata_of_the_multiset():
    values = np.array([0.3, 0.1, 0.3, 0.2, 0.1])
    w = np.array([2.0, 1.0, 0.0, 3.0, 1.0])
    expanded = np.repeat(values, w.astype(int))
    ranks = weighted_ranks(sort_pairs(values), w)
    want = rankdata(expanded)
    for v, r in zip(values, ranks, strict=True):
        if (expanded == v).any():
            assert r == pytest.approx(want[expanded == v][0])


def test_full_sample_is_geodiags_rsa_and_constant_rows_are_undefined():
    rng = np.random.default_rng(3)
    x, book = rng.normal(size=(20, 5)), rng.normal(size=(20, 3))
    ones = np.ones(190)
    got = weighted_spearman(
        weighted_ranks(sort_pairs(triangle(x)), ones),
        weighted_ranks(sort_pairs(triangle(book)), ones),
        ones,
    )
    assert got == pytest.approx(rsa(x, book, n_permutations=0, **SAMPLE).spearman, abs=1e-12)
    flat = np.zeros(190)  # every dissimilarity equal: no ranking, no correlation
    assert weighted_spearman(weighted_ranks(sort_pairs(flat), ones), ones * 95.5, ones) is None


def planted_cells(rng, n: int, seeds: int, signal: dict[str, float]):
    """Per arm, rows = signal * (codebook projected to 12 dims) + noise, a fresh noise
    per seed; the codebook has 5 clusters of codes, so RSA is well above 0 when the
    signal is."""
    centers = rng.normal(size=(5, 4))
    book = centers[np.arange(n) % 5] + 0.3 * rng.normal(size=(n, 4))
    proj = rng.normal(size=(4, 12))
    cells, raw = [], {}
    for arm, s in signal.items():
        for k in range(seeds):
            x = s * book @ proj + rng.normal(size=(n, 12))
            raw[(arm, k)] = x
            cells.append(Cell(arm, k, "final", None, {"a": sort_pairs(triangle(x))}))
    return cells, {"a": sort_pairs(triangle(book))}, {"a": n}, book, raw


def test_planted_structure_and_its_absence():
    rng = np.random.default_rng(0)
    cells, books, sizes, book, raw = planted_cells(rng, 40, 3, {"gti": 1.0, "mean": 0.0})
    doc = summarize_cells(cells, books, sizes, n_resamples=400, seed=0)
    rows = {(r["arm"], r["level"]): r for r in doc["rsa"]}
    gti, mean = rows[("gti", "a")], rows[("mean", "a")]
    want = np.mean(
        [rsa(raw[("gti", k)], book, n_permutations=0, **SAMPLE).spearman for k in range(3)]
    )
    assert gti["estimate"] == pytest.approx(want, abs=1e-12)
    assert gti["low"] > 0.3  # planted: the codebook's clusters are in the rows
    assert mean["low"] < 0 < mean["high"]  # pure noise: the interval covers 0
    (diff,) = [r for r in doc["paired"] if r["comparison"] == "gti - mean"]
    assert diff["estimate"] == pytest.approx(gti["estimate"] - mean["estimate"], abs=1e-12)
    assert diff["low"] > 0
    assert diff["per_seed"] == pytest.approx(
        [a - b for a, b in zip(gti["per_seed"], mean["per_seed"], strict=True)], abs=1e-12
    )
    md = "\n".join(to_markdown(doc, []))
    assert f"| gti - mean (final) | a | 3 | {diff['estimate']:+.3f} [{diff['low']:+.3f}" in md


def test_null_difference_interval_covers_zero_about_as_often_as_it_says():
    """Both arms pure noise, 60 fresh data sets: the 95% interval of gti - mean covers
    the true 0 in at least 51 of them (85%): an interval of exact 95% coverage falls to
    50 or fewer with probability 7.4e-4 (binomial). A conservative interval passes;
    this one covered 0 in 60 of 60 when written."""
    covered = 0
    for rep in range(60):
        rng = np.random.default_rng(100 + rep)
        cells, books, sizes, _, _ = planted_cells(rng, 24, 3, {"gti": 0.0, "mean": 0.0})
        doc = summarize_cells(cells, books, sizes, n_resamples=200, seed=rep)
        (diff,) = doc["paired"]
        covered += diff["low"] <= 0 <= diff["high"]
    assert covered >= 51


def test_seeds_are_resampled_too():
    """One seed of three carries the structure: the mean over seeds is a third of it,
    and the interval must reach up to about that one seed's value (all three draws
    equal to it: probability 1/27 > 2.5%) and down to about the others' 0 (no draw
    of it: 8/27), which resampling codes alone would never give."""
    rng = np.random.default_rng(5)
    centers = rng.normal(size=(5, 4))
    n = 40
    book = centers[np.arange(n) % 5] + 0.3 * rng.normal(size=(n, 4))
    proj = rng.normal(size=(4, 12))
    cells = []
    for k, s in enumerate((1.0, 0.0, 0.0)):
        x = s * book @ proj + rng.normal(size=(n, 12))
        cells.append(Cell("gti", k, "final", None, {"a": sort_pairs(triangle(x))}))
    doc = summarize_cells(
        cells, {"a": sort_pairs(triangle(book))}, {"a": n}, n_resamples=2000, seed=0
    )
    (row,) = doc["rsa"]
    top = max(row["per_seed"])
    assert top > 0.3
    assert row["estimate"] == pytest.approx(np.mean(row["per_seed"]), abs=1e-12)
    assert row["high"] > 0.8 * top and row["low"] < 0.2 * top


def test_an_entry_does_not_depend_on_the_other_runs_present():
    """Adding a third arm leaves gti - mean's interval exactly as it was: the code draws
    are per level and the seed draws per entry, so results assembled with 8 or 12 runs
    agree on what both contain."""
    rng = np.random.default_rng(7)
    cells, books, sizes, _, _ = planted_cells(rng, 30, 3, {"gti": 0.5, "mean": 0.0, "random": 0.0})
    two = [c for c in cells if c.arm != "random"]
    full = summarize_cells(cells, books, sizes, n_resamples=300, seed=0)
    part = summarize_cells(two, books, sizes, n_resamples=300, seed=0)

    def pick(doc, name):
        return next(r for r in doc["paired"] if r["comparison"] == name)

    assert pick(full, "gti - mean") == pick(part, "gti - mean")
    assert [r for r in full["rsa"] if r["arm"] != "random"] == part["rsa"]


def test_bootstrap_rows_take_the_seeds_with_both_checkpoints_and_skip_undefined_levels():
    """Cells: gti seeds 0-2 final, seeds 1-2 init; level ``b`` undefined (NaN) in seed 2's
    init. ``final - init`` is over seeds 1 and 2, and leaves ``b`` out."""
    keys = [("gti", s, "final") for s in range(3)] + [("gti", s, "init") for s in (1, 2)]
    index = {k: j for j, k in enumerate(keys)}
    point = {"a": np.arange(5.0), "b": np.array([0.0, 1.0, 2.0, 3.0, np.nan])}
    reps = {lv: np.tile(p, (50, 1)) for lv, p in point.items()}
    boot = Bootstrap(point, reps, index, seed=0, level=0.9)
    (row,) = boot.rows(("gti", "final"), ("gti", "init"), "x", {"comparison": "final - init"})
    assert list(row)[:3] == ["comparison", "level", "seeds"]
    assert row["level"] == "a" and row["seeds"] == [1, 2]
    assert row["per_seed"] == [1.0 - 3.0, 2.0 - 4.0]  # final minus init, seed by seed
    assert row["estimate"] == -2.0 and row["low"] == row["high"] == -2.0  # no spread
    assert [r["seeds"] for r in boot.rows(("gti", "final"), None, "y", {})] == [[0, 1, 2]] * 2
