"""geodiag.analysis.checkpoint: one checkpoint -> a CheckpointReport (measure_checkpoint,
measure_matrix), every figure against numpy/scipy on the rows the fixture planted.

The fixture's rows are written as float32, so the reference is computed from the planted
rows rounded to float32 and then summed in float64, as geodiag does. (Named
test_measure_checkpoint.py: tests/geodiag/io/test_checkpoint.py holds open_checkpoint's.)
"""

from __future__ import annotations

import numpy as np
import pytest
from geodiag_fixtures import BASE_VOCAB, DIM, LEVELS, base_rows, codebooks, planted_new_rows
from scipy.stats import spearmanr

from geodiag.analysis.checkpoint import measure_checkpoint, measure_matrix
from geodiag.analysis.options import AnalyzeOptions
from geodiag.io.checkpoint import open_checkpoint
from geodiag.io.sources.options import ReadOptions
from geodiag.jsonio import to_jsonable

N_NEW = sum(k for _, k in LEVELS)
FAST = AnalyzeOptions(n_permutations=0)


def stored(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32).astype(np.float64)


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def effective_rank(s: np.ndarray) -> float:
    p = s / s.sum()
    p = p[p > 0]
    return float(np.exp(-(p * np.log(p)).sum()))


def mean_pairwise_cosine(x: np.ndarray) -> float:
    c = unit(x) @ unit(x).T
    n = len(x)
    return float((c.sum() - np.trace(c)) / (n * (n - 1)))


def rms_spread(x: np.ndarray) -> float:
    return float(np.sqrt(((x - x.mean(axis=0)) ** 2).sum(axis=1).mean()))


def upper(m: np.ndarray) -> np.ndarray:
    return m[np.triu_indices(len(m), k=1)]


def test_new_rows_geometry_matches_numpy(make_ckpt):
    rep = measure_checkpoint(make_ckpt("grounded"), FAST)
    base, new = stored(base_rows()), stored(planted_new_rows("grounded", base_rows()))
    (m,) = rep.matrices
    assert (m.role, m.tensor, m.n_rows, m.dim, m.n_new) == (
        "input",
        "model.embed_tokens.weight",
        BASE_VOCAB + N_NEW,
        DIM,
        N_NEW,
    )
    assert rep.tied and rep.n_new_tokens == N_NEW and rep.base_vocab_size == BASE_VOCAB
    s = np.linalg.svd(new, compute_uv=False)
    sc = np.linalg.svd(new - new.mean(axis=0), compute_uv=False)
    np.testing.assert_allclose(m.new.uncentered.singular_values, s, rtol=1e-9)
    np.testing.assert_allclose(m.new.centered.singular_values, sc, rtol=1e-9, atol=1e-12)
    assert m.new.uncentered.effective_rank == pytest.approx(effective_rank(s), rel=1e-9)
    assert m.new.centered.effective_rank == pytest.approx(effective_rank(sc), rel=1e-9)
    assert m.new.centered.effective_rank_ratio == pytest.approx(effective_rank(sc) / N_NEW)
    assert m.new.mean_pairwise_cosine == pytest.approx(mean_pairwise_cosine(new), rel=1e-9)
    norms = np.linalg.norm(new, axis=1)
    assert m.new.row_norms.max == pytest.approx(norms.max())
    assert m.new.row_norms.median == pytest.approx(np.median(norms))
    assert m.new.spread == pytest.approx(rms_spread(new), rel=1e-9)
    # The vocabulary reference: an equal-size sample of the original rows, seeded by opts.seed.
    sample = np.sort(np.random.default_rng(FAST.seed).choice(BASE_VOCAB, N_NEW, replace=False))
    assert m.reference_size == N_NEW
    assert m.reference.spread == pytest.approx(rms_spread(base[sample]), rel=1e-9)
    assert m.new.spread_relative == pytest.approx(
        rms_spread(new) / rms_spread(base[sample]), rel=1e-9
    )
    assert m.norm_ratio == pytest.approx(norms.max() / np.linalg.norm(base, axis=1).max())


def test_levels_rsa_and_level_cosine_match_scipy(make_ckpt):
    rep = measure_checkpoint(make_ckpt("grounded"), FAST)
    new = stored(planted_new_rows("grounded", base_rows()))
    books = codebooks()
    (m,) = rep.matrices
    assert [(lv.name, lv.n_tokens) for lv in m.levels] == list(LEVELS)
    start, within, between = 0, [], []
    index = np.repeat(np.arange(len(LEVELS)), [k for _, k in LEVELS])
    cos = unit(new) @ unit(new).T
    for li, (lv, (name, k)) in enumerate(zip(m.levels, LEVELS, strict=True)):
        rows = new[start : start + k]
        start += k
        want = spearmanr(
            upper(1 - unit(rows) @ unit(rows).T), upper(1 - unit(books[name]) @ unit(books[name]).T)
        )
        assert lv.rsa.spearman == pytest.approx(want.statistic, abs=1e-9)
        assert lv.rsa.n_items == k and lv.rsa_skip_reason is None
        sc = np.linalg.svd(rows - rows.mean(axis=0), compute_uv=False)
        assert lv.geometry.centered.effective_rank == pytest.approx(effective_rank(sc), rel=1e-9)
        same = index == li
        within.append(upper(cos[np.ix_(same, same)]))
        between.append(cos[np.ix_(same, ~same)].ravel())
    assert m.level_cosine.within_mean == pytest.approx(np.concatenate(within).mean(), abs=1e-12)
    assert m.level_cosine.between_mean == pytest.approx(np.concatenate(between).mean(), abs=1e-12)
    # Grounded rows carry their codebook's structure: strongly positive RSA at every level.
    assert all(lv.rsa.spearman > 0.5 for lv in m.levels)


def test_nearest_original_tokens_match_numpy(make_ckpt):
    opts = AnalyzeOptions(n_permutations=0, neighbors_k=3, neighbors_max=5)
    rep = measure_checkpoint(make_ckpt("random"), opts)
    base, new = stored(base_rows()), stored(planted_new_rows("random", base_rows()))
    (m,) = rep.matrices
    # 5 of the 24 new tokens, a seeded sample, and the report says so.
    assert m.neighbors_sampled and len(m.neighbors) == 5
    assert any("seeded sample of 5 new tokens" in n for n in rep.notes)
    cos = unit(new) @ unit(base).T  # (24, 300)
    for tn in m.neighbors:
        row = cos[tn.id - BASE_VOCAB]
        want = np.argsort(-row, kind="stable")[:3]
        assert [nb.id for nb in tn.nearest] == want.tolist()
        np.testing.assert_allclose([nb.cosine for nb in tn.nearest], row[want], rtol=1e-9)


def test_untied_head_is_its_own_matrix(make_ckpt):
    head = np.random.default_rng(5).normal(size=(BASE_VOCAB + N_NEW, DIM))
    path = make_ckpt("random", untied_head=head)
    rep = measure_checkpoint(path, FAST)
    assert not rep.tied and [m.role for m in rep.matrices] == ["input", "output"]
    out = rep.matrices[1]
    assert out.tensor == "lm_head.weight"
    rows = stored(head[BASE_VOCAB:])
    np.testing.assert_allclose(
        out.new.uncentered.singular_values, np.linalg.svd(rows, compute_uv=False), rtol=1e-9
    )
    assert out.norm_ratio == pytest.approx(
        np.linalg.norm(rows, axis=1).max() / np.linalg.norm(stored(head[:BASE_VOCAB]), axis=1).max()
    )
    # measure_matrix alone gives the matrix measure_checkpoint put in the report.
    ckpt = open_checkpoint(path)
    assert to_jsonable(measure_matrix(ckpt, ckpt.matrices[1], FAST)[0]) == to_jsonable(out)
    again = measure_checkpoint(open_checkpoint(path), FAST)
    assert to_jsonable(again.matrices) == to_jsonable(rep.matrices)


def test_non_finite_new_rows_are_dropped_when_allowed(make_ckpt):
    rows = planted_new_rows("random", base_rows())
    rows[[3, 17]] = np.nan
    rep = measure_checkpoint(make_ckpt(rows), FAST, read=ReadOptions(allow_nonfinite=True))
    (m,) = rep.matrices
    kept = stored(np.delete(rows, [3, 17], axis=0))
    assert (m.n_new, m.nonfinite_rows_dropped) == (N_NEW - 2, 2)
    np.testing.assert_allclose(
        m.new.uncentered.singular_values, np.linalg.svd(kept, compute_uv=False), rtol=1e-9
    )
    # Rows 3 (level a) and 17 (level c) are gone: their levels no longer pair with codes.
    assert [lv.n_tokens for lv in m.levels] == [7, 8, 7]
    skipped = {lv.name: lv.rsa_skip_reason for lv in m.levels}
    assert all(lv.rsa is None for lv in m.levels)
    assert set(skipped.values()) == {
        "rows dropped as non-finite: token rows no longer pair with codes"
    }


def test_a_vocabulary_smaller_than_the_new_rows_is_the_whole_reference(make_ckpt):
    base = base_rows()[:10]
    rep = measure_checkpoint(make_ckpt("random", base=base), FAST)
    (m,) = rep.matrices
    new = stored(planted_new_rows("random", base))
    assert m.reference_size == 10
    assert m.new.spread_relative == pytest.approx(rms_spread(new) / rms_spread(stored(base)))
    assert "vocabulary reference: 10 original rows (fewer than the new rows)" in rep.notes


@pytest.mark.parametrize(
    ("n_base", "n_new", "reference_size", "reason"),
    [
        (1, 24, None, "only 1 original row(s) below id 1: too few to compare"),
        # A reference as large as the new rows would be a single row too: ask for 50.
        (300, 1, 50, "a single new row has no spread around its mean"),
    ],
)
def test_spread_ratio_undefined_says_why(make_ckpt, n_base, n_new, reference_size, reason):
    base = base_rows()[:n_base]
    rows = planted_new_rows("random", base_rows())[:n_new]
    path = make_ckpt(
        rows, base=base, with_sidecar=False, with_tokenizer=False, with_codebooks=False
    )
    read = ReadOptions(new_tokens=(n_base, n_base + n_new))
    rep = measure_checkpoint(
        path, AnalyzeOptions(n_permutations=0, reference_size=reference_size), read=read
    )
    (m,) = rep.matrices
    assert m.reference is None and m.new.spread_relative is None
    assert m.reference_undefined_reason.startswith(reason)
    assert any(n.startswith("spread ratio undefined: " + reason) for n in rep.notes)


def test_codebook_health_counts_the_sidecars_items(make_ckpt):
    rep = measure_checkpoint(make_ckpt("random"), FAST)
    # The fixture's items: 10, codes drawn by default_rng(3) level after level, item by item.
    rng = np.random.default_rng(3)
    codes = np.array([[rng.integers(k) for _, k in LEVELS] for _ in range(10)])
    assert rep.codebook.n_items == 10
    for li, (usage, (name, k)) in enumerate(zip(rep.codebook.levels, LEVELS, strict=True)):
        used = set(codes[:, li].tolist())
        assert (usage.name, usage.n_codes, usage.n_used) == (name, k, len(used))
        assert usage.n_dead == k - len(used) and usage.dead_codes == sorted(set(range(k)) - used)
    # Without a sidecar there are no items to count.
    bare = make_ckpt("random", name="bare", with_sidecar=False)
    assert measure_checkpoint(bare, FAST).codebook is None


@pytest.mark.parametrize("kind", ["mean", "mean-noise", "random", "grounded", "all rows new"])
def test_the_gates_measure_judges_as_the_full_analysis(make_ckpt, kind):
    """GATE_MEASURE (``geodiag check``, ``geodiag.check``, the callback's save-time gate)
    leaves out the uncentered spectrum and the reference sample's figures, which no check
    reads: the same verdict, checks and notes, and every other figure the same bits."""
    from dataclasses import replace

    from geodiag.analysis.options import GATE_MEASURE, NO_NEIGHBOURS
    from geodiag.gate.checks import GateConfig
    from geodiag.gate.verdict import judge
    from geodiag.jsonio import dumps

    read = ReadOptions(all_rows_new=True) if kind == "all rows new" else ReadOptions()
    root = make_ckpt("random" if kind == "all rows new" else kind)
    full = measure_checkpoint(
        open_checkpoint(root, read), AnalyzeOptions(n_permutations=50, **NO_NEIGHBOURS)
    )
    gate = measure_checkpoint(
        open_checkpoint(root, read), AnalyzeOptions(n_permutations=50, **GATE_MEASURE)
    )
    (m,) = full.matrices
    (g,) = gate.matrices
    assert g.reference is None and g.new.uncentered is None
    assert m.new.uncentered is not None
    assert (m.reference is None) == (kind == "all rows new")
    assert g.reference_undefined_reason == m.reference_undefined_reason
    assert dumps(g) == dumps(replace(m, reference=None, new=replace(m.new, uncentered=None)))
    assert gate.notes == full.notes
    cfg = GateConfig()
    assert dumps(judge(gate, cfg)) == dumps(judge(full, cfg))
