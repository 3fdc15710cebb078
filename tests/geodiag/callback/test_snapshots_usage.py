"""The training data the callback counts (geodiag.callback.snapshots.dataset_usage)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("transformers")  # geodiag.callback needs it

from geodiag.callback.snapshots import dataset_usage  # noqa: E402


def test_counts_the_input_ids_of_every_example_against_numpy():
    rng = np.random.default_rng(0)
    examples = [
        {"input_ids": rng.integers(0, 50, size=rng.integers(1, 9)).tolist()} for _ in range(40)
    ]
    u = dataset_usage(examples)
    want = np.bincount(np.concatenate([e["input_ids"] for e in examples]))
    assert u.complete and u.n_examples == 40
    assert np.array_equal(u.counts, want)
    assert u.of(np.array([0, 49, 10_000])).tolist() == [want[0], want[49], 0]


def test_a_dataset_counted_in_part_says_so():
    examples = [{"input_ids": [1, 2]}, {"input_ids": [3]}, {"input_ids": [4]}]
    u = dataset_usage(examples, limit=2)
    assert (u.n_examples, u.complete) == (2, False)
    assert u.of(np.array([1, 3, 4])).tolist() == [1, 1, 0]


def test_label_padding_is_no_token_and_other_datasets_are_not_guessed():
    u = dataset_usage([{"input_ids": [5, -100, 5]}])
    assert u.of(np.array([5])).tolist() == [2]
    assert dataset_usage(iter([{"input_ids": [1]}])) is None  # no length: an iterable
    assert dataset_usage([{"text": "raw"}]) is None  # not tokenized
    assert dataset_usage(None) is None
