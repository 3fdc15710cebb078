"""Row-by-row findings: identical groups against a brute-force reference, exact
vocabulary statistics against numpy, and the gate cases they decide."""

from __future__ import annotations

import json

import numpy as np
import pytest
from geodiag_fixtures import BASE_VOCAB, DIM, base_rows
from scipy.sparse.csgraph import connected_components
from scipy.spatial.distance import pdist, squareform
from typer.testing import CliRunner

from geodiag.cli import app
from geodiag.metrics.untrained import TOLERANCE, distances, identical_groups, vocabulary_stats


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def _reference_groups(x: np.ndarray, tol: float) -> list[list[int]]:
    """Single linkage at ``tol`` by scipy: every pair's distance, connected components."""
    adjacency = squareform(pdist(x)) <= tol
    _, label = connected_components(adjacency, directed=False)
    groups = [np.flatnonzero(label == k).tolist() for k in np.unique(label)]
    return sorted((g for g in groups if len(g) >= 2), key=lambda g: g[0])


@pytest.mark.parametrize("seed", range(5))
def test_identical_groups_equal_brute_force_on_planted_clusters(seed):
    rng = np.random.default_rng(seed)
    healthy = rng.normal(size=(300, 48))
    centers = rng.normal(size=(6, 48))
    sizes = rng.integers(2, 30, size=6)
    tight = [c + 1e-6 * rng.normal(size=(k, 48)) for c, k in zip(centers, sizes, strict=True)]
    x = np.concatenate([healthy, *tight])
    x = x[rng.permutation(len(x))]
    got = [g.tolist() for g in identical_groups(x, 1e-3, seed=seed)]
    assert got == _reference_groups(x, 1e-3)
    assert sorted(len(g) for g in got) == sorted(sizes.tolist())


def test_identical_groups_exact_duplicates_and_edge_cases():
    x = np.array([[1.0, 2], [3, 4], [1, 2], [3, 4], [5, 6]])
    assert [g.tolist() for g in identical_groups(x, 0.0)] == [[0, 2], [1, 3]]
    assert [g.tolist() for g in identical_groups(x, 1e-9)] == [[0, 2], [1, 3]]
    assert identical_groups(x[:1], 1.0) == []
    huge = np.full((3, 4), 1e37)
    assert [g.tolist() for g in identical_groups(huge, 1e-3)] == [[0, 1, 2]]


def test_identical_groups_scale_to_a_large_collapsed_block():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(size=(2000, 64)), np.tile(rng.normal(size=64), (5000, 1))])
    (group,) = identical_groups(x, 1e-3)
    assert group.tolist() == list(range(2000, 7000))


def test_vocabulary_stats_equal_numpy_over_blocks():
    rng = np.random.default_rng(1)
    v = rng.normal(size=(1000, 16)) * 0.01 + 50.0  # small spread around a large mean
    v[17] = np.nan
    blocks = [v[i : i + 128] for i in range(0, 1000, 128)]
    stats = vocabulary_stats(blocks)
    ok = np.delete(v, 17, axis=0)
    assert stats.n_rows == 999 and stats.n_nonfinite == 1
    np.testing.assert_allclose(stats.mean, ok.mean(axis=0), rtol=1e-13)
    spread = np.sqrt(((ok - ok.mean(axis=0)) ** 2).sum(axis=1).mean())
    assert stats.spread == pytest.approx(spread, rel=1e-9)
    assert stats.max_norm == pytest.approx(np.linalg.norm(ok, axis=1).max(), rel=1e-15)
    assert vocabulary_stats([]) is None
    assert (distances(ok[:3], ok[0]) <= 0.0).tolist() == [True, False, False]


def test_vocabulary_stats_of_float32_blocks_within_their_stated_error():
    """Float32 blocks stay float32 (VocabularyAccumulator): each block's column sums by one
    BLAS product, each row's squares in float32. The bounds the docstring derives: the mean
    within b * 2^-24 of each dimension's mean absolute deviation from the pivot (b rows a
    block), the spread within d * 2^-24; both far below TOLERANCE. Reference: numpy in
    float64 on the same float32 values."""
    rng = np.random.default_rng(2)
    b, d = 128, 48
    v = (rng.normal(size=(1000, d)) * np.linspace(0.02, 0.001, d) + 50.0).astype(np.float32)
    stats = vocabulary_stats([v[i : i + b] for i in range(0, 1000, b)])
    x = v.astype(np.float64)
    want = x.mean(axis=0)
    pivot = x[:b].mean(axis=0)  # the first block's mean (held as float32: within 2^-24 x 50)
    deviation = np.abs(x - pivot).mean(axis=0) + 50.0 * 2**-24
    assert np.all(np.abs(stats.mean - want) <= b * 2**-24 * deviation)
    spread = np.sqrt(((x - want) ** 2).sum(axis=1).mean())
    assert stats.spread == pytest.approx(spread, rel=d * 2**-24)
    # Against the rows' own scale: the mean's error is no part of the untrained tolerance.
    assert np.abs(stats.mean - want).max() < 1e-3 * TOLERANCE * spread


# ---- the gate on the cases the block checks got wrong --------------------------------


ONE = ("--base-vocab-size", BASE_VOCAB)


def _one_new(make_ckpt, row, name):
    return make_ckpt(
        np.asarray(row)[None, :],
        name=name,
        with_sidecar=False,
        with_codebooks=False,
        with_tokenizer=False,
    )


def test_one_new_token_is_not_called_collapsed(make_ckpt):
    """Before: "All 1 new tokens are the same vector: mean initialization" and exit 1."""
    rng = np.random.default_rng(0)
    ckpt = _one_new(make_ckpt, rng.normal(size=DIM) * 0.1, "one")
    res = run("check", ckpt, *ONE, "--json")
    assert res.exit_code == 0, res.output
    checks = {c["name"]: c for c in json.loads(res.stdout)["results"][0]["checks"]}
    for name in ("effective_rank_ratio", "spread_relative", "mean_pairwise_cosine"):
        assert checks[name]["status"] == "skip" and "single new row" in checks[name]["message"]
    assert checks["n_untrained"]["status"] == "pass"
    res = run("check", ckpt, *ONE)
    assert "same vector" not in res.stdout and "Skipped as undefined" in res.stdout


def test_one_new_token_at_the_vocabulary_mean_fails(make_ckpt):
    base = base_rows()
    ckpt = _one_new(make_ckpt, base.mean(axis=0), "one-mean")
    res = run("check", ckpt, *ONE)
    assert res.exit_code == 1
    assert "[fail] n_untrained 1 > 0" in res.stdout and "vocabulary mean" in res.stdout


def test_new_tokens_over_most_of_the_vocabulary_are_not_called_mean_init(make_ckpt):
    """--new-tokens 1:N: one original row is no vocabulary to compare with."""
    ckpt = make_ckpt("random", name="wide", with_sidecar=False, with_codebooks=False)
    n = BASE_VOCAB + 24
    res = run("check", ckpt, "--new-tokens", f"1:{n}", "--json")
    assert res.exit_code == 0, res.output
    checks = {c["name"]: c for c in json.loads(res.stdout)["results"][0]["checks"]}
    assert checks["spread_relative"]["status"] == "skip"
    assert "only 1 original row(s) below id 1" in checks["spread_relative"]["message"]
    out = run("check", ckpt, "--new-tokens", f"1:{n}").stdout
    assert "mean init" not in out and "same way" not in out


def test_rows_far_longer_than_the_vocabulary_fail(make_ckpt):
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(24, DIM))
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    ckpt = make_ckpt(rows * 1e37, name="huge", with_sidecar=False, with_codebooks=False)
    res = run("check", ckpt)
    assert res.exit_code == 1, res.output
    assert "[fail] norm_ratio" in res.stdout and "emit it everywhere" in res.stdout
    ok = make_ckpt(
        rows * np.linalg.norm(base_rows(), axis=1).max(),
        name="ok",
        with_sidecar=False,
        with_codebooks=False,
    )
    assert "[pass] norm_ratio 1 <= 10" in run("check", ok).stdout


def test_allow_nonfinite_with_every_new_row_nonfinite_blames_the_new_rows(make_ckpt):
    ckpt = make_ckpt(
        np.full((24, DIM), np.nan), name="nan", with_sidecar=False, with_codebooks=False
    )
    res = run("check", ckpt, "--allow-nonfinite")
    assert res.exit_code == 2
    assert "all 24 new-token rows" in res.stderr and "original rows" not in res.stderr


def test_dead_codes_are_named_as_such(make_ckpt):
    """Codes no item uses get no training example: their rows stay at the init's fallback.
    The fixture's sidecar (10 items over 8 codes per level) leaves some codes unused."""
    from geodiag_fixtures import LEVELS, planted_new_rows

    from geodiag.io.vocabulary import sidecar as sidecar_mod

    rows = planted_new_rows("grounded", base_rows())
    ckpt = make_ckpt(rows, name="probe")
    side = sidecar_mod.load(ckpt / sidecar_mod.FILENAME)
    used = [{codes[li] for codes in side.items.values()} for li in range(len(LEVELS))]
    dead = [
        sum(k for _, k in LEVELS[:li]) + c
        for li, (_, k) in enumerate(LEVELS)
        for c in range(k)
        if c not in used[li]
    ]
    assert len(dead) >= 2  # the planted case
    rows[dead] = rows[dead[0]]  # one fallback row for every dead code
    ckpt = make_ckpt(rows, name="dead")
    res = run("check", ckpt, "--permutations", 0)
    # Nothing can feed a dead code: the gate warns, naming them and why, and passes.
    assert res.exit_code == 0
    assert "[warn] n_untrained 0 <= 0: " in res.stdout
    assert f"; {len(dead)} spared, as nothing feeds them" in res.stdout
    assert "no item's ID uses their codes" in res.stdout
    # Under the old rule (every untrained token counts) they fail, said to be dead codes.
    res = run("check", ckpt, "--permutations", 0, "--untrained-uses-to-fail", 0)
    assert res.exit_code == 1
    assert f"[fail] n_untrained {len(dead)} > 0" in res.stdout
    assert "a code no item uses (a dead code)" in res.stdout
    ids = [BASE_VOCAB + i for i in dead]
    rep = json.loads(run("metrics", ckpt, "--json", "--permutations", 0).stdout)
    u = rep["matrices"][0]["untrained"]
    assert u["dead_codes"]["ids"] == ids[:8] and u["dead_codes"]["size"] == len(dead)


def test_row_tests_by_blocks_match_the_whole_matrix(monkeypatch):
    """zero_rows, distances and identical_groups walk the rows in blocks (no (n, d)
    temporary at 100,000 rows): the same answers as in one block."""
    from geodiag.metrics import untrained

    rng = np.random.default_rng(3)
    point = rng.normal(size=12)
    x = rng.normal(size=(50, 12))
    x[::7] = point  # a group at one point, spread over every block
    x[3] = 0.0
    whole = (
        untrained.zero_rows(x),
        distances(x, point) <= 1e-9,
        [g.tolist() for g in identical_groups(x, 1e-9)],
    )
    monkeypatch.setattr(untrained, "_BLOCK_ROWS", 4)
    blocks = (
        untrained.zero_rows(x),
        distances(x, point) <= 1e-9,
        [g.tolist() for g in identical_groups(x, 1e-9)],
    )
    np.testing.assert_array_equal(blocks[0], whole[0])
    np.testing.assert_array_equal(blocks[1], whole[1])
    assert blocks[2] == whole[2] == [list(range(0, 50, 7))]
    np.testing.assert_allclose(
        untrained.distances(x, point), np.linalg.norm(x - point, axis=1), rtol=1e-15
    )
