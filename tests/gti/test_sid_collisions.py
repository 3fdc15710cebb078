"""Collision strategies (registry, dedup-level, sinkhorn and its fallback) and the
code-usage statistics, on hand-made codes with known answers."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from gti.semantic_ids.collisions import COLLISION_STRATEGIES, groups_of, sinkhorn_assign
from gti.semantic_ids.stats import collision_stats, level_stats


def residuals_near(
    codes_last: np.ndarray, book: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    return book[codes_last] + 0.01 * rng.standard_normal((len(codes_last), book.shape[1]))


def case(n_levels: int = 3, k: int = 4):
    rng = np.random.default_rng(0)
    codes = np.array([[0, 1, 2], [0, 1, 2], [0, 1, 2], [3, 3, 3], [3, 3, 3], [1, 0, 0]])[
        :, :n_levels
    ]
    book = rng.standard_normal((k, 8))
    return codes, residuals_near(codes[:, -1], book, rng), book


def test_registry_shares_one_keyword_only_signature():
    assert set(COLLISION_STRATEGIES) == {"dedup-level", "sinkhorn"}
    for fn in COLLISION_STRATEGIES.values():
        params = inspect.signature(fn).parameters
        required = {n for n, p in params.items() if p.default is inspect.Parameter.empty}
        assert required == {"codes", "last_residuals", "last_codebook", "generator"}
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values())


def test_dedup_level_numbers_items_within_groups():
    codes, res, book = case()
    out = COLLISION_STRATEGIES["dedup-level"](
        codes=codes, last_residuals=res, last_codebook=book, generator=None
    )
    assert out.codes[:, -1].tolist() == [0, 1, 2, 0, 1, 0]
    assert out.level_sizes == [4, 4, 4, 3]
    assert (out.codes[:, :3] == codes).all() and not groups_of(out.codes)


def test_sinkhorn_moves_only_last_codes_and_keeps_one_member_per_group():
    codes, res, book = case()
    out = COLLISION_STRATEGIES["sinkhorn"](
        codes=codes, last_residuals=res, last_codebook=book, generator=None
    )
    assert out.strategy_used == "sinkhorn" and out.level_sizes == [4, 4, 4]
    assert not groups_of(out.codes)
    assert (out.codes[:, :2] == codes[:, :2]).all()
    assert out.n_reassigned == 3  # two of the three-item group, one of the pair
    assert out.codes[5].tolist() == [1, 0, 0]  # never collided, never moved


def test_sinkhorn_falls_back_when_a_prefix_outgrows_the_last_codebook():
    rng = np.random.default_rng(0)
    codes = np.zeros((5, 2), dtype=np.int64)  # 5 items on prefix [0], only 4 last-level codes
    book = rng.standard_normal((4, 8))
    out = COLLISION_STRATEGIES["sinkhorn"](
        codes=codes,
        last_residuals=residuals_near(codes[:, -1], book, rng),
        last_codebook=book,
        generator=None,
    )
    assert out.strategy_used == "dedup-level" and "fell back to dedup-level" in out.notes[0]
    assert not groups_of(out.codes)


def test_sinkhorn_out_of_rounds_falls_back_and_says_so():
    """The guard behind the loop (unreachable with enough rounds) falls back the same way."""
    rng = np.random.default_rng(0)
    codes = np.array([[0, 1], [0, 1], [1, 0]], dtype=np.int64)  # one pair, room to move
    book = rng.standard_normal((4, 8))
    out = COLLISION_STRATEGIES["sinkhorn"](
        codes=codes,
        last_residuals=residuals_near(codes[:, -1], book, rng),
        last_codebook=book,
        generator=None,
        max_rounds=0,
    )
    assert out.strategy_used == "dedup-level" and not groups_of(out.codes)
    assert out.notes == ["sinkhorn left collisions after 0 rounds; fell back to dedup-level"]
    assert (out.codes[:, :2] == codes).all()  # the codes as they stood, plus a dedup level


def test_sinkhorn_assign_balances_and_respects_the_mask():
    # Every row likes column 0 best (greedy argmin would collide all four); row i's
    # runner-up is column i. The balanced plan gives each row its own column.
    i, j = np.meshgrid(np.arange(4), np.arange(4), indexing="ij")
    cost = np.where(j == 0, 0.0, 1.0 + 0.5 * np.abs(i - j))
    assert sorted(sinkhorn_assign(cost, np.ones_like(cost, dtype=bool)).tolist()) == [0, 1, 2, 3]
    allowed = np.ones_like(cost, dtype=bool)
    allowed[:, 0] = False
    assert 0 not in sinkhorn_assign(cost, allowed).tolist()


def test_level_stats_against_hand_values():
    st = level_stats(np.array([0, 0, 1, 1]), size=4, name="a")
    assert (st.used, st.utilization) == (2, 0.5)
    assert st.perplexity == pytest.approx(2.0)  # two equally used codes
    skewed = level_stats(np.array([0, 0, 0, 1]), size=2, name="b")
    h = -(0.75 * np.log(0.75) + 0.25 * np.log(0.25))
    assert skewed.perplexity == pytest.approx(np.exp(h))


def test_collision_stats_counts_items_not_pairs():
    st = collision_stats(np.array([[0, 1], [0, 1], [0, 1], [2, 2], [3, 3]]))
    assert (st.n_unique, st.n_groups, st.max_group) == (3, 1, 3)
    assert st.collision_rate == pytest.approx(3 / 5)
    assert collision_stats(np.array([[0], [1]])).collision_rate == 0.0


def test_build_resolves_by_the_registry_and_refuses_a_strategy_that_leaves_collisions(
    monkeypatch,
):
    from types import SimpleNamespace

    from gti.semantic_ids import build
    from gti.semantic_ids.collisions import Resolved

    codes, residuals, book = case()
    fit = SimpleNamespace(codes=codes, last_residuals=residuals, codebooks=[book, book, book])
    out = build.resolve_collisions(fit, "dedup-level", seed=0)
    assert out.strategy_used == "dedup-level" and not groups_of(out.codes)
    monkeypatch.setitem(
        COLLISION_STRATEGIES, "broken", lambda **kw: Resolved(kw["codes"], [4, 4, 4], "broken")
    )
    with pytest.raises(RuntimeError, match="strategy broken left colliding SIDs"):
        build.resolve_collisions(fit, "broken", seed=0)
