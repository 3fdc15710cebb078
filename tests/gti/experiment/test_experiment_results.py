"""The results table: mean and sample std over seeds, against hand computation."""

from __future__ import annotations

import pytest

from gti.experiment.results import summarize, to_markdown


def fake_eval(r1: float, n1: float) -> dict:
    metrics = {"recall@1": r1, "ndcg@1": n1}
    return {"splits": {"test": {"n_users": 10, "metrics": metrics}}}


def test_mean_and_spread_over_seeds():
    evals = {
        "gti": {0: fake_eval(0.1, 0.1), 1: fake_eval(0.3, 0.2)},
        "mean": {0: fake_eval(0.0, 0.0)},
    }
    s = summarize(evals, [1], ["test"])
    gti = s["arms"]["gti"]["splits"]["test"]["metrics"]["recall@1"]
    assert gti["mean"] == pytest.approx(0.2) and gti["n"] == 2 and gti["values"] == [0.1, 0.3]
    assert gti["std"] == pytest.approx(0.1414213562, abs=1e-9)  # sqrt(((0.1)^2 + (0.1)^2) / 1)
    assert s["arms"]["mean"]["splits"]["test"]["metrics"]["ndcg@1"]["std"] is None
    md = to_markdown(s, "t")
    assert "| gti | 2 | 0.2000 ± 0.1414 | 0.1500 ± 0.0707 |" in md
    assert "| mean | 1 | 0.0000 | 0.0000 |" in md
