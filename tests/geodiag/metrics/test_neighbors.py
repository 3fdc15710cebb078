"""NearestRows: streamed top-k against a brute-force sort over the whole vocabulary."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pytest

from geodiag.metrics.neighbors import NearestRows


def nearest_rows(
    queries: np.ndarray, chunks: Iterable[tuple[np.ndarray, np.ndarray]], *, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """NearestRows fed every (ids, rows) block of ``chunks``, as the vocabulary walk feeds it."""
    scan = NearestRows(queries, k)
    for chunk_ids, chunk_rows in chunks:
        scan.add(chunk_ids, chunk_rows)
    return scan.result()


def blocks(ids: np.ndarray, rows: np.ndarray, size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    for start in range(0, len(ids), size):
        yield ids[start : start + size], rows[start : start + size]


def brute_force(queries, ids, rows, k):
    norms = np.linalg.norm(rows, axis=1)
    ok = norms > 0
    ids, rows, norms = ids[ok], rows[ok], norms[ok]
    cos = (queries / np.linalg.norm(queries, axis=1, keepdims=True)) @ rows.T / norms
    out_ids, out_cos = [], []
    for row in cos:
        order = np.lexsort((ids, -row))[:k]  # cosine descending, then id ascending
        out_ids.append(ids[order])
        out_cos.append(row[order])
    return np.array(out_ids), np.array(out_cos)


@pytest.mark.parametrize("chunk", [1, 7, 64, 1000])
@pytest.mark.parametrize("k", [1, 5])
def test_matches_brute_force(chunk, k):
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(300, 12))
    ids = rng.permutation(10_000)[:300].astype(np.int64)  # ids need not be contiguous
    queries = rng.normal(size=(9, 12))
    got_ids, got_cos = nearest_rows(queries, blocks(ids, rows, chunk), k=k)
    want_ids, want_cos = brute_force(queries, ids, rows, k)
    assert got_ids.dtype == np.int64 and got_cos.dtype == np.float64
    assert got_ids.shape == got_cos.shape == (9, k)
    np.testing.assert_array_equal(got_ids, want_ids)
    np.testing.assert_allclose(got_cos, want_cos, atol=1e-13)


@pytest.mark.parametrize("chunk", [1, 3, 8, 100])
def test_exact_ties_go_to_the_lower_id(chunk):
    # Basis vectors repeated under many ids: every cosine is exact, so ties are exact.
    rng = np.random.default_rng(1)
    basis = np.eye(4)
    rows = basis[rng.integers(0, 4, size=40)]
    ids = rng.permutation(40).astype(np.int64)
    queries = np.array([[3.0, 1.0, 1.0, 0.5], [1.0, 1.0, 1.0, 1.0], [-1.0, 2.0, 0.0, 2.0]])
    got_ids, got_cos = nearest_rows(queries, blocks(ids, rows, chunk), k=6)
    want_ids, want_cos = brute_force(queries, ids, rows, 6)
    np.testing.assert_array_equal(got_ids, want_ids)
    np.testing.assert_array_equal(got_cos, want_cos)


def test_zero_rows_are_skipped_and_k_is_capped():
    rows = np.array([[1.0, 0.0], [0.0, 0.0], [0.0, 2.0]])
    ids = np.array([10, 11, 12])
    got_ids, got_cos = nearest_rows(np.array([[1.0, 1.0]]), blocks(ids, rows, 2), k=5)
    np.testing.assert_array_equal(got_ids, [[10, 12]])  # tie at 1/sqrt(2): lower id first
    np.testing.assert_allclose(got_cos, [[2**-0.5, 2**-0.5]], atol=1e-15)


def test_bad_input_raises():
    ok = [(np.arange(3), np.ones((3, 2)))]
    with pytest.raises(ValueError, match="zero norm"):
        nearest_rows(np.zeros((1, 2)), ok, k=5)
    with pytest.raises(ValueError, match="do not pair"):
        nearest_rows(np.ones((1, 3)), ok, k=5)
    with pytest.raises(ValueError, match="k must be"):
        nearest_rows(np.ones((1, 2)), ok, k=0)


def test_near_identical_queries_in_float32_blocks_match_float64_brute_force():
    """The read path's case: mean-resized queries (one point plus 1e-5 noise) against a
    float32 vocabulary in large blocks. The float32 scan only shortlists; the returned
    cosines are exact float64 values of the stored rows."""
    rng = np.random.default_rng(3)
    vocab = rng.normal(size=(5000, 64)).astype(np.float32)
    queries = vocab.mean(axis=0) + rng.normal(size=(40, 64)) * 1e-5
    ids = np.arange(5000, dtype=np.int64)
    got_ids, got_cos = nearest_rows(queries, blocks(ids, vocab, 2048), k=5)
    want_ids, want_cos = brute_force(queries, ids, vocab.astype(np.float64), 5)
    np.testing.assert_array_equal(got_ids, want_ids)
    # Both sides are float64 dot products of the same values, summed in different orders.
    np.testing.assert_allclose(got_cos, want_cos, atol=64 * np.finfo(np.float64).eps)


@pytest.mark.parametrize("noise", [1e-6, 1e-3, 0.05, 0.2])
@pytest.mark.parametrize("chunk", [3, 100, 4096])
def test_queries_around_one_point_skip_rows_without_changing_the_answer(noise, chunk):
    """The centre bound drops rows only when k others are certainly closer: queries from
    one point (collapsed) to a radius of ~0.4 around it, a crowd of rows near that point
    and exact ties, against the float64 brute force. (The crowd is no tighter than 0.05:
    finer than float32 can rank, the shortlist itself, bound or not, loses rows.)"""
    from geodiag.metrics.neighbors import _spread

    rng = np.random.default_rng(int(noise * 1e6) + chunk)
    d = 32
    centre = rng.normal(size=d)
    vocab = rng.normal(size=(3000, d))
    vocab[:200] = centre + rng.normal(size=(200, d)) * 0.05  # crowd around the queries
    vocab[200:210] = vocab[0]  # exact ties, under other ids
    vocab = vocab.astype(np.float32)
    queries = centre + rng.normal(size=(25, d)) * noise * np.linalg.norm(centre) / np.sqrt(d)
    _, radius = _spread(queries / np.linalg.norm(queries, axis=1, keepdims=True))
    assert radius < 0.5  # the bound is in use
    ids = np.arange(3000, dtype=np.int64)
    for k in (1, 5, 20):
        got_ids, got_cos = nearest_rows(queries, blocks(ids, vocab, chunk), k=k)
        want_ids, want_cos = brute_force(queries, ids, vocab.astype(np.float64), k)
        np.testing.assert_array_equal(got_ids, want_ids)
        # Both sides are float64 dot products of the same values, summed in different orders.
        np.testing.assert_allclose(got_cos, want_cos, atol=64 * np.finfo(np.float64).eps)


def test_centre_bound_error_term_covers_float32_scores():
    """The bound's float32 error term against measured errors of the scores it bounds."""
    from geodiag.metrics.neighbors import _score_error

    rng = np.random.default_rng(5)
    for d in (8, 576, 4096):
        rows = rng.normal(size=(2000, d)) * rng.uniform(1e-3, 1e3, size=(2000, 1))
        centre = rng.normal(size=d)
        centre /= np.linalg.norm(centre)
        rows32 = rows.astype(np.float32)
        exact = (
            rows32.astype(np.float64) @ centre / np.linalg.norm(rows32.astype(np.float64), axis=1)
        )
        c32 = centre.astype(np.float32)
        approx = (rows32 @ c32) / np.sqrt(np.einsum("ij,ij->i", rows32, rows32))
        assert np.abs(approx - exact).max() < _score_error(d)
