"""The per-user rankings file: round trip, metrics against gti.evaluate.metrics, and
one clear error per defect."""

from __future__ import annotations

import json

import numpy as np
import pytest

from geodiag.errors import InputError
from gti.evaluate.metrics import topk_metrics
from gti.evaluate.rankings import (
    Rankings,
    from_unsorted,
    load_rankings,
    metric_means,
    per_user_metrics,
    save_rankings,
)


def sample() -> Rankings:
    rows = [("u2", "c", ["a", "b", "c"]), ("u1", "a", ["a", "x"]), ("u3", "z", ["b", "a", "c"])]
    return from_unsorted("test", rows, top=3, source={"model": "hand"})


def test_round_trip_sorts_users_and_keeps_everything(tmp_path):
    r = sample()
    assert r.users == ["u1", "u2", "u3"]
    back = load_rankings(save_rankings(tmp_path / "r.json", r))
    assert back == r


def test_metrics_match_the_index_implementation():
    r = sample()
    # Hand: u1 hit at rank 0, u2 at rank 2, u3 missing.
    m = per_user_metrics(r, (1, 3))
    np.testing.assert_array_equal(m["recall@1"], [1, 0, 0])
    np.testing.assert_allclose(m["ndcg@3"], [1.0, 1 / np.log2(4), 0.0])
    index = {"a": 0, "b": 1, "c": 2, "x": 3, "z": 4}
    ranked = np.array([[0, 3, -1], [0, 1, 2], [1, 0, 2]])
    ref = topk_metrics(ranked, np.array([index[t] for t in r.targets]), (1, 3))
    assert metric_means(r, (1, 3)) == pytest.approx(ref)


@pytest.mark.parametrize(
    "text, message",
    [
        (
            '{"format": "gti.rankings", "format_version": 1, "top": 3, "users": [["u1"',
            "not valid JSON",
        ),
        ('{"format": "other"}', "not a gti.rankings file"),
        (
            '{"format": "gti.rankings", "format_version": 9, "top": 3, "users": []}',
            "format_version",
        ),
        (
            '{"format": "gti.rankings", "format_version": 1, "top": 3, "users": [["u1", "a", ["a", "a"]]]}',
            "lists an item twice",
        ),
        (
            '{"format": "gti.rankings", "format_version": 1, "top": 1, "users": [["u1", "a", ["a", "b"]]]}',
            "user row 0",
        ),
        (
            '{"format": "gti.rankings", "format_version": 1, "top": 2, "users": [["u2", "a", []], ["u1", "a", []]]}',
            "sorted",
        ),
    ],
)
def test_defects_are_one_clear_error_naming_the_file(tmp_path, text, message):
    path = tmp_path / "bad.rankings.json"
    path.write_text(text)
    with pytest.raises(InputError, match=message) as e:
        load_rankings(path)
    assert "bad.rankings.json" in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        load_rankings(tmp_path / "nope.json")


def test_file_is_one_user_per_line(tmp_path):
    path = save_rankings(tmp_path / "r.json", sample())
    lines = path.read_text().splitlines()
    assert len(lines) == 2 + 3 and json.loads(lines[1].rstrip(",")) == ["u1", "a", ["a", "x"]]
