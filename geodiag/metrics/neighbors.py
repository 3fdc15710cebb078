"""Nearest original-vocabulary rows of each new token, streamed over the vocabulary."""

from __future__ import annotations

import numpy as np

from geodiag.metrics.geometry import as_matrix, row_norms

_MARGIN = 8  # extra float32 candidates per query and block, re-ranked in float64
# With the centre bound few rows reach the product, so a wider margin costs ~nothing; it
# matters where the bound makes the product's shape vary from block to block, and with it
# the last bits of float32 scores: identical rows in two blocks can then score apart, and
# a group of them larger than the margin, tied at the cut, could lose its lowest id.
_MARGIN_PRUNED = 64
_PRUNE_BELOW = 0.5  # a query spread (radius) past which the centre bound skips ~nothing


def _score_error(d: int) -> float:
    """A bound on |float32 cosine - exact cosine| for unit-scale vectors of d dims.

    Float32 dot product and sum of squares: gamma_d = d u each (u = 2**-24), the
    norm's square root and the division a few u more, rounding the centre to float32
    one u: (1.5 d + 6) u in all; doubled for safety. 1e-12 covers the float64
    re-scoring, which must rank a pruned row strictly below its witnesses too.
    """
    return 2.0 * (d + 4) * 2.0**-24 + 1e-12


def _spread(units: np.ndarray) -> tuple[np.ndarray | None, float]:
    """(unit centre (d,), max distance of a unit query to it), or (None, inf) when the
    queries have no common direction."""
    centre = units.mean(axis=0)
    norm = float(np.linalg.norm(centre))
    if not norm > 0:
        return None, np.inf
    centre /= norm
    return centre, float(row_norms(units - centre).max())


def _order(cos: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Column order per row: cosine descending, then id ascending. cos, ids (q, c)."""
    return np.lexsort((ids, -cos), axis=-1)


def _chunk_top_k(cos: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of cos (q, m) over columns with ids (m,), ties at the cut broken by lower id."""
    q, m = cos.shape
    if m <= k:
        pick = np.broadcast_to(np.arange(m), (q, m)).copy()
    else:
        pick = np.argpartition(cos, m - k, axis=1)[:, m - k :]  # (q, k), unordered, no copy of -cos
        picked = np.take_along_axis(cos, pick, axis=1)
        cut = picked.min(axis=1, keepdims=True)
        # argpartition breaks exact ties at the cut arbitrarily; redo those rows exactly.
        for r in np.flatnonzero((cos == cut).sum(axis=1) > (picked == cut).sum(axis=1)):
            cand = np.flatnonzero(cos[r] >= cut[r, 0])
            pick[r] = cand[np.lexsort((ids[cand], -cos[r, cand]))[:k]]
    return np.take_along_axis(cos, pick, axis=1), ids[pick]


def _merge_hits(
    cand_ids: np.ndarray,
    cand_score: np.ndarray,
    qi: np.ndarray,
    hit_ids: np.ndarray,
    hit_score: np.ndarray,
    c: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Each query's best c of its candidates (q, c) plus sparse hits (query qi, id, score),
    by score descending then id ascending."""
    q = cand_ids.shape[0]
    if not len(qi):
        return cand_ids, cand_score
    all_q = np.concatenate([np.repeat(np.arange(q), c), qi])
    all_ids = np.concatenate([cand_ids.ravel(), hit_ids])
    all_score = np.concatenate([cand_score.ravel(), hit_score])
    order = np.lexsort((all_ids, -all_score, all_q))  # by query, then score desc, then id
    all_q, all_ids, all_score = all_q[order], all_ids[order], all_score[order]
    first = np.searchsorted(all_q, np.arange(q))  # each query's first entry
    take = first[:, None] + np.arange(c)  # (q, c): every query has >= c entries
    return all_ids[take], all_score[take]


class NearestRows:
    """The k rows of highest cosine to each query, one vocabulary block at a time: a
    consumer of the single pass over the original rows (:mod:`geodiag.analysis.vocabulary`).

    queries (q, d); ``add(ids (m,), rows (m, d))`` for each block, float32 or float64, so
    memory stays at one block; ``result()`` returns (ids (q, k') int64, cosines (q, k')
    float64), sorted by cosine descending then id ascending, with k' = min(k, number of
    usable rows). Rows of zero or non-finite norm are skipped (no direction); a zero-norm
    query raises ValueError.

    Each block is scored by one float32 product (the scan's whole cost: q x m x d); the
    best k + margin candidates per query over all blocks are then re-scored exactly in
    float64 from the stored values (a float32 block holds float32, bfloat16 or float16
    weights exactly). A true top-k row is lost only if float32 rounding (~1e-6 in cosine)
    moved more than the margin's worth of other rows past it.

    Queries that lie close together (a collapsed init: every new row at the mean plus
    noise) skip most of the product, exactly: with c their unit centre and r the largest
    distance of a unit query from it, cos(q, x) is within r of cos(c, x) for every row
    x. One float32 product per block with c alone (1/q of the full one) ranks the rows
    against c; a row whose score s_x falls more than 2 (r + e) below the k-th best score
    seen so far (e: the float32 error bound) has k rows certainly closer to every query,
    and is dropped before the product with the queries. Spread queries (r >= 0.5) skip
    the bound.
    """

    def __init__(self, queries: np.ndarray, k: int) -> None:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        queries = as_matrix(queries, "queries", min_rows=0)
        self.k = k
        self.q, self.d = q, d = queries.shape
        self._shape = queries.shape
        qn = row_norms(queries)
        if np.any(qn == 0):
            first = int(np.flatnonzero(qn == 0)[0])
            raise ValueError(f"query row {first} has zero norm: its nearest rows are undefined")
        self.units = queries / qn[:, None]  # (q, d)
        self.units32 = self.units.astype(np.float32)
        centre, radius = _spread(self.units) if q else (None, np.inf)
        self.prune = centre is not None and radius < _PRUNE_BELOW
        if self.prune:
            self.centre32 = centre.astype(np.float32)
            self.slack = 2.0 * (radius + _score_error(d))  # below the k-th best centre score
            self.best = np.full(k, -np.inf, dtype=np.float32)  # the k best centre scores so far
        self.c = k + (_MARGIN_PRUNED if self.prune else _MARGIN)
        # Running candidates per query, by float32 score: ids (q, c) and their scores; the
        # row of every current candidate, kept once per id and dropped when no query holds
        # it (a dict of rows, so a block adds its few newcomers without copying the rest).
        self.cand_ids = np.empty((q, 0), dtype=np.int64)
        self.cand_score = np.empty((q, 0), dtype=np.float32)
        self.pool: dict[int, np.ndarray] = {}

    def _usable(self, chunk_ids, chunk_rows):
        """(ids, rows, rows as float32, float32 norms) of a block's rows that have a
        direction and, under the centre bound, may still reach some query's top k."""
        ids = np.asarray(chunk_ids, dtype=np.int64)
        rows = np.asarray(chunk_rows)
        if rows.dtype not in (np.float32, np.float64):
            rows = rows.astype(np.float64)
        if rows.ndim != 2 or rows.shape[1:] != (self.d,) or ids.shape != (rows.shape[0],):
            raise ValueError(
                f"chunk ids {ids.shape} and rows {rows.shape} do not pair with queries {self._shape}: "
                "expected (m,) ids and (m, d) rows"
            )
        rows32 = rows if rows.dtype == np.float32 else rows.astype(np.float32)
        # Norms for ranking only, in float32 (the exact ones come with the re-scoring).
        # Rows whose squares under- or overflow float32 (|x| < 1e-19 or > 1e19) count
        # as zero or non-finite: no embedding in use lives there.
        rn32 = np.sqrt(np.einsum("ij,ij->i", rows32, rows32))  # (m,)
        keep = (rn32 > 0) & np.isfinite(rn32)
        if not keep.all():
            ids, rows, rows32, rn32 = ids[keep], rows[keep], rows32[keep], rn32[keep]
        if not len(ids) or not self.q:
            return None
        if self.prune:
            k = self.k
            s = rows32 @ self.centre32  # (m,)
            s /= rn32
            top = s if len(s) <= k else np.partition(s, len(s) - k)[-k:]
            self.best = np.sort(np.concatenate([self.best, top]))[-k:]
            near = s >= self.best[0] - self.slack  # best[0]: the k-th best; -inf until k rows
            if not near.all():
                ids, rows, rows32, rn32 = ids[near], rows[near], rows32[near], rn32[near]
            if not len(ids):
                return None
        return ids, rows, rows32, rn32

    def add(self, chunk_ids: np.ndarray, chunk_rows: np.ndarray) -> None:
        usable = self._usable(chunk_ids, chunk_rows)
        if usable is None:
            return
        ids, rows, rows32, rn32 = usable
        if np.any(np.diff(ids) <= 0):  # position order must be id order for tie-breaking
            o = np.argsort(ids, kind="stable")
            ids, rows, rows32, rn32 = ids[o], rows[o], rows32[o], rn32[o]
        approx = self.units32 @ rows32.T  # (q, m) float32: the scan's one large product
        approx /= rn32
        c = self.c
        if self.cand_ids.shape[1] == c:
            # Only scores reaching a query's current c-th best can enter: one comparison
            # pass finds the few, where a partition of every row would cost ~10x more.
            qi, mi = np.nonzero(approx >= self.cand_score[:, -1:])
            self.cand_ids, self.cand_score = _merge_hits(
                self.cand_ids, self.cand_score, qi, ids[mi], approx[qi, mi], c
            )
        else:
            top, pos = _chunk_top_k(approx, np.arange(len(ids)), min(c, len(ids)))  # (q, c')
            merged_ids = np.concatenate([self.cand_ids, ids[pos]], axis=1)
            merged_score = np.concatenate([self.cand_score, top], axis=1)
            order = _order(merged_score, merged_ids)[:, :c]
            self.cand_ids = np.take_along_axis(merged_ids, order, axis=1)
            self.cand_score = np.take_along_axis(merged_score, order, axis=1)
        # Rows of the current candidates only (exact values: float32 blocks hold the
        # stored weights exactly): newcomers from this block, leavers dropped.
        pool = self.pool
        wanted = set(self.cand_ids.ravel().tolist())  # (np.unique would import numpy.ma)
        for gone in pool.keys() - wanted:
            del pool[gone]
        new_ids = np.array(sorted(wanted - pool.keys()), dtype=np.int64)
        for i, row in zip(new_ids.tolist(), rows[np.searchsorted(ids, new_ids)], strict=True):
            pool[i] = row.copy()

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        cand_ids, k = self.cand_ids, self.k
        if not cand_ids.shape[1]:
            return cand_ids, np.empty((self.q, 0))
        # Exact float64 cosines of the candidates, then the final order: cosine descending,
        # then id ascending.
        pool_ids = np.array(sorted(self.pool), dtype=np.int64)
        pool_rows = np.array([self.pool[i] for i in pool_ids.tolist()], dtype=np.float64)  # (p, d)
        exact = np.empty(cand_ids.shape)  # (q, c)
        pool_norms = row_norms(pool_rows)
        for j in range(cand_ids.shape[1]):  # a (q, c, d) gather would cost c times the queries
            at = np.searchsorted(pool_ids, cand_ids[:, j])
            exact[:, j] = np.einsum("qd,qd->q", self.units, pool_rows[at]) / pool_norms[at]
        exact = np.clip(exact, -1.0, 1.0)
        order = _order(exact, cand_ids)[:, :k]
        return np.take_along_axis(cand_ids, order, axis=1), np.take_along_axis(exact, order, axis=1)
