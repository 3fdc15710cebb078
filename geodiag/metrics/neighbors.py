"""Nearest original-vocabulary rows of each new token, streamed over the vocabulary."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from geodiag.metrics.geometry import as_matrix, row_norms

_MARGIN = 4  # extra float32 candidates per query and block, re-ranked in float64


def _order(cos: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Column order per row: cosine descending, then id ascending. cos, ids (q, c)."""
    return np.lexsort((ids, -cos), axis=-1)


def _chunk_top_k(cos: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of cos (q, m) over columns with ids (m,), ties at the cut broken by lower id."""
    q, m = cos.shape
    if m <= k:
        pick = np.broadcast_to(np.arange(m), (q, m)).copy()
    else:
        pick = np.argpartition(-cos, k - 1, axis=1)[:, :k]  # (q, k), unordered
        picked = np.take_along_axis(cos, pick, axis=1)
        cut = picked.min(axis=1, keepdims=True)
        # argpartition breaks exact ties at the cut arbitrarily; redo those rows exactly.
        for r in np.flatnonzero((cos == cut).sum(axis=1) > (picked == cut).sum(axis=1)):
            cand = np.flatnonzero(cos[r] >= cut[r, 0])
            pick[r] = cand[np.lexsort((ids[cand], -cos[r, cand]))[:k]]
    return np.take_along_axis(cos, pick, axis=1), ids[pick]


def nearest_rows(
    queries: np.ndarray,
    chunks: Iterable[tuple[np.ndarray, np.ndarray]],
    k: int = 5,
) -> tuple[np.ndarray, np.ndarray]:
    """The k rows of highest cosine to each query, over a stream of vocabulary blocks.

    queries (q, d); ``chunks`` yields (ids (m,), rows (m, d)) blocks, so memory stays at
    one block. Returns (ids (q, k') int64, cosines (q, k') float64), sorted by cosine
    descending then id ascending, with k' = min(k, number of usable rows). Rows of zero
    norm are skipped (no direction); a zero-norm query raises ValueError.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    queries = as_matrix(queries, "queries", min_rows=0)
    q, d = queries.shape
    qn = row_norms(queries)
    if np.any(qn == 0):
        first = int(np.flatnonzero(qn == 0)[0])
        raise ValueError(f"query row {first} has zero norm: its nearest rows are undefined")
    units = queries / qn[:, None]  # (q, d)
    units32 = units.astype(np.float32)
    best_cos = np.empty((q, 0))
    best_ids = np.empty((q, 0), dtype=np.int64)
    for chunk_ids, chunk_rows in chunks:
        ids = np.asarray(chunk_ids, dtype=np.int64)
        rows = as_matrix(chunk_rows, "chunk rows", min_rows=0)
        if rows.shape[1:] != (d,) or ids.shape != (rows.shape[0],):
            raise ValueError(
                f"chunk ids {ids.shape} and rows {rows.shape} do not pair with queries {queries.shape}: "
                "expected (m,) ids and (m, d) rows"
            )
        rn = row_norms(rows)
        keep = rn > 0
        if not keep.all():
            ids, rows, rn = ids[keep], rows[keep], rn[keep]
        if not len(ids) or not q:
            continue
        if np.any(np.diff(ids) <= 0):  # position order must be id order for tie-breaking
            o = np.argsort(ids, kind="stable")
            ids, rows, rn = ids[o], rows[o], rn[o]
        # Candidates from a float32 product (half the time of float64), re-scored exactly:
        # a true top-k row is lost only if float32 rounding (~1e-7) moved more than
        # _MARGIN others past it.
        approx = (units32 @ rows.astype(np.float32).T) / rn.astype(np.float32)  # (q, m)
        _, cand = _chunk_top_k(approx, np.arange(len(ids)), min(k + _MARGIN, len(ids)))  # (q, c)
        exact = np.empty(cand.shape)  # (q, c) float64, one candidate column at a time:
        for j in range(cand.shape[1]):  # a (q, c, d) gather would cost c times the queries
            exact[:, j] = np.einsum("qd,qd->q", units, rows[cand[:, j]]) / rn[cand[:, j]]
        top_cos, top_ids = np.clip(exact, -1.0, 1.0), ids[cand]
        merged_cos = np.concatenate([best_cos, top_cos], axis=1)  # (q, <= 2k)
        merged_ids = np.concatenate([best_ids, top_ids], axis=1)
        order = _order(merged_cos, merged_ids)[:, :k]
        best_cos = np.take_along_axis(merged_cos, order, axis=1)
        best_ids = np.take_along_axis(merged_ids, order, axis=1)
    return best_ids, best_cos
