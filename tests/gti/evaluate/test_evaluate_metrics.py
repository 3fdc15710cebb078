"""Recall@K and NDCG@K against hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gti.evaluate.metrics import ndcg_at_k, recall_at_k, target_ranks, topk_metrics

# Four users, five ranked items each; targets at ranks 0, 2, 4 and absent.
RANKED = np.array(
    [
        [7, 1, 2, 3, 4],
        [5, 6, 9, 0, 1],
        [1, 2, 3, 4, 8],
        [1, 2, 3, 4, 5],
    ]
)
TARGETS = np.array([7, 9, 8, 0])


def test_ranks():
    assert target_ranks(RANKED, TARGETS).tolist() == [0, 2, 4, 5]


@pytest.mark.parametrize(
    ("k", "recall", "ndcg"),
    [
        (1, 1 / 4, 1 / 4),
        (3, 2 / 4, (1 + 1 / math.log2(4)) / 4),
        (5, 3 / 4, (1 + 1 / math.log2(4) + 1 / math.log2(6)) / 4),
    ],
)
def test_hand_computed(k, recall, ndcg):
    assert recall_at_k(RANKED, TARGETS, k) == pytest.approx(recall, abs=1e-12)
    assert ndcg_at_k(RANKED, TARGETS, k) == pytest.approx(ndcg, abs=1e-12)


def test_padding_never_matches():
    # -1 marks "no item" (beam search with fewer valid items than beams).
    ranked = np.array([[3, -1, -1], [-1, -1, -1]])
    assert recall_at_k(ranked, np.array([3, 4]), 3) == 0.5


def test_topk_metrics_names_and_bounds():
    m = topk_metrics(RANKED, TARGETS, (1, 5))
    assert list(m) == ["recall@1", "ndcg@1", "recall@5", "ndcg@5"]
    with pytest.raises(ValueError, match="exceeds"):
        topk_metrics(RANKED, TARGETS, (10,))
