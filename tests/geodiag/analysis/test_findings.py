"""Per-token findings on planted fixtures: the planted ids come back, and nothing else.

All-zero rows, rows that barely moved since ``--reference``, norm outliers; the vocabulary's
norm percentiles and the movement cut against numpy."""

from __future__ import annotations

import json

import numpy as np
import pytest
from geodiag_fixtures import BASE_VOCAB, DIM, base_rows, planted_new_rows
from typer.testing import CliRunner

import geodiag
from geodiag.cli import app
from geodiag.jsonio import dumps
from geodiag.metrics.untrained import (
    MOVED_FRACTION,
    NORM_HIGH,
    NORM_LOW,
    barely_moved,
    quantile,
    vocabulary_stats,
)


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def untrained_of(ckpt, *args):
    res = run("metrics", ckpt, "--json", "--permutations", 0, *args)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)["matrices"][0]["untrained"]


def test_zero_rows_are_untrained_not_bad_input(make_ckpt):
    rows = planted_new_rows("random", base_rows())
    rows[[4, 9]] = 0
    ckpt = make_ckpt(rows, name="zero")
    res = run("check", ckpt, "--permutations", 0)
    assert res.exit_code == 1, res.output
    assert "[fail] n_untrained 2 > 0" in res.stdout and "2 all zero" in res.stdout
    assert "<a_4>, <b_1>" in res.stdout
    u = untrained_of(ckpt, "--neighbors", 5)  # the neighbour scan skips the zero rows
    assert u["zero"]["ids"] == [BASE_VOCAB + 4, BASE_VOCAB + 9]
    zero = {t["id"] for t in u["tokens"] if "zero" in t["findings"]}
    assert zero == {BASE_VOCAB + 4, BASE_VOCAB + 9}
    rep = json.loads(run("metrics", ckpt, "--json", "--permutations", 0).stdout)
    assert rep["matrices"][0]["new"]["mean_pairwise_cosine"] is None  # undefined, not NaN


def _moved(rows: np.ndarray, scale: float, seed: int) -> np.ndarray:
    return rows + np.random.default_rng(seed).normal(size=rows.shape) * scale


@pytest.mark.parametrize("planted", [[], [3, 11, 17]])
def test_rows_that_barely_moved_since_the_reference(make_ckpt, planted):
    base = base_rows()
    init = planted_new_rows("random", base)
    after = _moved(init, 1e-3, 1)
    after[planted] = _moved(init[planted], 1e-7, 2)  # a weight-decay-sized nudge
    ref = make_ckpt(init, name="init")
    ckpt = make_ckpt(after, name=f"sft{len(planted)}", base=_moved(base, 1e-3, 3))
    u = untrained_of(ckpt, "--reference", ref)
    got = [] if u["barely_moved"] is None else u["barely_moved"]["ids"]
    assert got == [BASE_VOCAB + i for i in planted]
    assert u["n_untrained"] == len(planted)
    mv = u["movement"]
    assert mv["yardstick"] == "original rows"
    # The cut against numpy: the median movement of the sampled original rows.
    assert mv["threshold"] == pytest.approx(MOVED_FRACTION * mv["median_original"])
    assert 1e-3 * np.sqrt(DIM) * 0.5 < mv["median_original"] < 1e-3 * np.sqrt(DIM) * 1.5
    moved = {t["id"]: t["movement"] for t in u["tokens"]}
    for i in planted:
        expect = np.linalg.norm(after[i].astype(np.float32) - init[i].astype(np.float32))
        assert moved[BASE_VOCAB + i] == pytest.approx(expect, rel=1e-5)
    if planted:  # the verdict names the cause they share, not the init's remedy
        res = run("check", ckpt, "--reference", ref, "--permutations", 0)
        assert res.exit_code == 1
        assert "training has not reached them since the reference" in res.stdout
        assert "trained before, or by you" not in res.stdout
    # A reference with other new tokens is bad input naming the flag.
    other = make_ckpt(init[:20], name="other", with_sidecar=False, with_tokenizer=False)
    res = run("check", ckpt, "--reference", other, "--base-vocab-size", BASE_VOCAB)
    assert res.exit_code == 2 and "--reference" in res.stderr


def test_barely_moved_cut_and_quantile_against_numpy():
    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 1000):
        x = rng.lognormal(size=n)
        for q in (0.0, 0.001, 0.5, 0.999, 1.0):
            assert quantile(x, q) == pytest.approx(np.quantile(x, q), rel=1e-12)
    movement = np.array([0.0, 1e-6, 1.0, 2.0, 3.0])
    flagged, cut = barely_moved(movement, np.array([0.5, 1.0, 1.5]))
    assert flagged.tolist() == [True, True, False, False, False]
    assert cut.threshold == MOVED_FRACTION * 1.0 and cut.yardstick == "original rows"
    # A frozen backbone: the original rows did not move, the new rows' median sets the cut.
    flagged, cut = barely_moved(movement, np.zeros(3))
    assert cut.yardstick == "new rows" and cut.threshold == MOVED_FRACTION * 1.0
    assert flagged.tolist() == [True, True, False, False, False]


def test_norm_outliers_against_the_vocabulary_percentiles(make_ckpt):
    base = base_rows()
    norms = np.linalg.norm(base.astype(np.float32).astype(np.float64), axis=1)
    stats = vocabulary_stats([base.astype(np.float32)])
    for q, name in ((0.1, "p0.1"), (50, "p50"), (99.9, "p99.9")):
        assert stats.norm_percentiles[name] == pytest.approx(np.percentile(norms, q), rel=1e-6)
    rows = planted_new_rows("random", base)
    unit = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    rows[5] = unit[5] * NORM_LOW * np.percentile(norms, 0.1) * 0.5
    rows[6] = unit[6] * NORM_HIGH * np.percentile(norms, 99.9) * 1.5
    u = untrained_of(make_ckpt(rows, name="norms"))
    assert u["norm_small"]["ids"] == [BASE_VOCAB + 5]
    assert u["norm_large"]["ids"] == [BASE_VOCAB + 6]
    assert u["n_untrained"] == 0  # findings, not untrained rows


def test_healthy_fixtures_flag_nothing(make_ckpt):
    """The false-positive side: random and grounded inits, with and without a reference."""
    base = base_rows()
    for kind in ("random", "grounded"):
        rows = planted_new_rows(kind, base)
        ref = make_ckpt(rows, name=f"{kind}-init", with_sidecar=False)
        ckpt = make_ckpt(
            _moved(rows, 1e-3, 4),
            name=f"{kind}-sft",
            with_sidecar=False,
            base=_moved(base, 1e-3, 5),
        )
        for args in ((), ("--reference", ref)):
            u = untrained_of(ckpt, *args)
            assert u["n_flagged"] == 0 and u["tokens"] == [], (kind, args)


def test_measure_takes_a_reference_and_serializes_the_findings():
    base = base_rows()
    init = np.concatenate([base, planted_new_rows("random", base)]).astype(np.float32)
    after = init + np.random.default_rng(0).normal(size=init.shape).astype(np.float32) * 1e-3
    after[BASE_VOCAB + 2] = init[BASE_VOCAB + 2]
    ids = list(range(BASE_VOCAB, len(init)))
    rep = geodiag.measure(after, new_ids=ids, reference=init, neighbors=0, n_permutations=0)
    u = rep.matrices[0].untrained
    assert u.barely_moved.ids == [BASE_VOCAB + 2] and u.tokens[0].findings == ["barely_moved"]
    data = json.loads(dumps(rep))
    assert data["matrices"][0]["untrained"]["tokens"][0]["id"] == BASE_VOCAB + 2
    assert "_movement" not in data["matrices"][0]["untrained"]
