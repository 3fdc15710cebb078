"""Content encoders: the LM mean-pool (shapes, padding-invariance, on-disk cache keyed
by model identity and text hash) with a tiny local model, and the bag-of-words encoder."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gti.models.backbone import resolve_backbone
from gti.semantic_ids.embeddings import bow_embeddings, cache_path, lm_embeddings, mean_pool_texts

TEXTS = ["bakiro lomesu", "bakiro lomesu tavine gefuza", "movie genres"]


# The model runs in float64, so padded and unpadded passes differ only by summation
# order: <= ~1e3 ops * eps64 * O(1) ~ 1e-13 before mean_pool_texts rounds to float32.
# Two float64 values that close round to float32 values at most one ulp apart, and an
# ulp is <= 2**-23 of the value: rtol = 2 ulp (for the value vs its neighbour), and
# ATOL = 1e-12 for elements near 0, where the ulp is smaller than the float64 difference.
RTOL, ATOL = 2 * 2**-23, 1e-12


@pytest.mark.numerics
def test_mean_pool_ignores_padding(tiny_model_dir):
    model, tokenizer = resolve_backbone(str(tiny_model_dir)).load()
    model.to(torch.float64)
    batched = mean_pool_texts(TEXTS, model, tokenizer, batch_size=3, progress=False)
    alone = np.concatenate([mean_pool_texts([t], model, tokenizer, progress=False) for t in TEXTS])
    assert batched.shape == (3, model.config.hidden_size) and batched.dtype == np.float32
    np.testing.assert_allclose(batched, alone, rtol=RTOL, atol=ATOL)
    # Reference: the plain mean of the last hidden state of one unpadded text.
    ids = tokenizer(TEXTS[1], return_tensors="pt")
    with torch.no_grad():
        ref = model.base_model(**ids).last_hidden_state[0].mean(0).numpy()
    np.testing.assert_allclose(batched[1], ref, rtol=RTOL, atol=ATOL)


def test_lm_embeddings_are_cached_per_text(tiny_model_dir):
    backbone = resolve_backbone(str(tiny_model_dir))
    first, n_first = lm_embeddings(TEXTS, backbone, progress=False)
    assert n_first == 3 and cache_path(backbone.identity, 256).is_file()

    def must_not_load():
        raise AssertionError("everything is cached: the model must not be loaded")

    backbone.loader = must_not_load
    again, n_again = lm_embeddings(list(reversed(TEXTS)), backbone, progress=False)
    assert n_again == 0
    np.testing.assert_array_equal(again, first[::-1])


def test_lm_cache_encodes_only_new_texts_and_keys_on_identity(tiny_model_dir):
    backbone = resolve_backbone(str(tiny_model_dir))
    lm_embeddings(TEXTS[:2], backbone, progress=False)
    _, n_new = lm_embeddings(TEXTS, backbone, progress=False)
    assert n_new == 1
    backbone.identity += ":other-model"
    _, n_other = lm_embeddings(TEXTS, backbone, progress=False)
    assert n_other == 3


def test_bow_is_deterministic_normalized_and_word_based():
    a, b = bow_embeddings(TEXTS), bow_embeddings(TEXTS)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, rtol=1e-6)
    cos = a @ a.T
    assert cos[0, 1] == pytest.approx(np.sqrt(2 / 4), abs=0.05)  # 2 shared words of 2 and 4
    assert abs(cos[0, 2]) < 0.2
