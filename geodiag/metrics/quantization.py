"""What conversion and quantization did to the new rows: training rows a, deployed rows b.

Beside :func:`geodiag.metrics.drift.drift` (per-token cosine, structure RSA), a deployed
file raises its own questions: how large the error is per token, which tokens the
quantizer made identical (the model can no longer tell them apart), whose nearest new
token changed, and whether the RSA with the codebooks survives, level by level.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from geodiag.metrics.geometry import as_matrix, row_norms
from geodiag.metrics.rsa import SIGNIFICANCE, RSAResult, rsa

# A level "keeps the structure" when its RSA with the codebook drops by at most this
# much: below the spread of RSA between seeds of one arm in the demo study (~0.05).
MAX_RSA_DROP = 0.05
N_EXAMPLES = 5  # token pairs / neighbour changes named in the findings
_CHUNK = 1024  # rows of the cosine matrix computed at once: (1024, n) float64


@dataclass(frozen=True)
class NeighbourChange:
    token: str
    before: str  # nearest other new token in the training rows
    after: str  # ... in the deployed rows


@dataclass(frozen=True)
class QuantizationFindings:
    dtype: str  # the deployed matrix's type (Q4_K, Q8_0, F16...)
    per_token_relative_error: list[float | None]  # ||b_i - a_i|| / ||a_i||; None: a_i = 0
    relative_error_mean: float | None
    relative_error_max: float | None
    identical_pairs: int  # token pairs identical in b but not in a
    identical_examples: list[tuple[str, str]]
    neighbour_changed: int  # tokens whose nearest new-token neighbour is another in b
    neighbour_examples: list[NeighbourChange]
    rsa_before: dict[str, RSAResult]  # per level, rows vs codebook (empty: no codebooks)
    rsa_after: dict[str, RSAResult]
    verdict: str


def identical_pairs(a: np.ndarray, b: np.ndarray) -> list[tuple[int, int]]:
    """Pairs (i < j) with b_i == b_j exactly while a_i != a_j: merged by the export."""
    _, groups = np.unique(b, axis=0, return_inverse=True)
    groups = groups.reshape(-1)
    pairs = []
    for g in np.flatnonzero(np.bincount(groups) > 1):
        members = np.flatnonzero(groups == g)
        for x, i in enumerate(members):
            for j in members[x + 1 :]:
                if not np.array_equal(a[i], a[j]):
                    pairs.append((int(i), int(j)))
    return pairs


def _unit(m: np.ndarray) -> np.ndarray:
    n = row_norms(m)
    return m / np.where(n > 0, n, 1.0)[:, None]


def neighbour_changes(a: np.ndarray, b: np.ndarray) -> list[tuple[int, int, int]]:
    """(i, nearest before, nearest after) for each token whose nearest other token by
    cosine in b was not a nearest one (ties counted as nearest) in a."""
    ua, ub = _unit(a), _unit(b)
    out = []
    for start in range(0, len(a), _CHUNK):
        rows = np.arange(start, min(start + _CHUNK, len(a)))
        ca, cb = ua[rows] @ ua.T, ub[rows] @ ub.T  # (chunk, n)
        ca[np.arange(len(rows)), rows] = -np.inf  # not oneself
        cb[np.arange(len(rows)), rows] = -np.inf
        near_a, near_b = ca.argmax(axis=1), cb.argmax(axis=1)
        best_a = ca[np.arange(len(rows)), near_a]
        moved = ca[np.arange(len(rows)), near_b] < best_a - 1e-12
        out += [(int(rows[k]), int(near_a[k]), int(near_b[k])) for k in np.flatnonzero(moved)]
    return out


def _verdict(
    dtype: str, before: dict[str, RSAResult], after: dict[str, RSAResult], structure, pairs, moved
) -> str:
    levels = [n for n in before if before[n].spearman is not None]
    structured = [
        n for n in levels if (before[n].p_value or 1.0) <= SIGNIFICANCE
    ]  # not significant: no structure to keep
    shown = ", ".join(f"{n} {before[n].spearman:.2f} -> {_s(after[n].spearman)}" for n in levels)
    if levels and not structured:
        head = f"{dtype}: the training rows carry no codebook structure to keep (RSA {shown})"
    elif levels:
        lost = [
            n
            for n in structured
            if after[n].spearman is None or before[n].spearman - after[n].spearman > MAX_RSA_DROP
        ]
        head = (
            f"{dtype} loses the structure at level(s) {', '.join(lost)} (RSA {shown})"
            if lost
            else f"{dtype} keeps the structure (RSA {shown})"
        )
    elif structure.spearman is not None:
        head = f"{dtype}: structure RSA between training and deployed rows {structure.spearman:.3f}"
    else:
        head = f"{dtype}: structure RSA undefined ({structure.undefined_reason})"
    return f"{head}; {pairs} pairs of tokens became identical; {moved} tokens changed their nearest new-token neighbour"


def _s(x: float | None) -> str:
    return "undefined" if x is None else f"{x:.2f}"


def quantization_findings(
    a: np.ndarray,
    b: np.ndarray,
    *,
    dtype: str,
    tokens: list[str],
    structure: RSAResult,
    levels: dict[str, tuple[np.ndarray, np.ndarray]] | None = None,
    n_permutations: int,
    seed: int,
    max_items: int,
) -> QuantizationFindings:
    """Findings for training rows a (n, d) and deployed rows b (n, d) of ``tokens``.

    ``levels``: level name -> (mask over the n tokens, codebook vectors (k, code_dim) of
    the masked tokens, in token order); ``structure``: drift's a-vs-b RSA, for the verdict
    when there are no codebooks."""
    a, b = as_matrix(a, "a"), as_matrix(b, "b")
    na = row_norms(a)
    err = np.full(len(a), np.nan)
    err[na > 0] = row_norms(b - a)[na > 0] / na[na > 0]
    per_token = [None if np.isnan(e) else float(e) for e in err]
    defined = err[~np.isnan(err)]
    pairs = identical_pairs(a, b)
    moved = neighbour_changes(a, b)
    kw = dict(n_permutations=n_permutations, seed=seed, max_items=max_items)
    names = ("the new rows", "the codebook")
    before, after = {}, {}
    for name, (mask, book) in (levels or {}).items():
        before[name] = rsa(a[mask], book, names=names, **kw)
        after[name] = rsa(b[mask], book, names=names, **kw)
    return QuantizationFindings(
        dtype=dtype,
        per_token_relative_error=per_token,
        relative_error_mean=float(defined.mean()) if defined.size else None,
        relative_error_max=float(defined.max()) if defined.size else None,
        identical_pairs=len(pairs),
        identical_examples=[(tokens[i], tokens[j]) for i, j in pairs[:N_EXAMPLES]],
        neighbour_changed=len(moved),
        neighbour_examples=[
            NeighbourChange(tokens[i], tokens[p], tokens[q]) for i, p, q in moved[:N_EXAMPLES]
        ],
        rsa_before=before,
        rsa_after=after,
        verdict=_verdict(dtype, before, after, structure, len(pairs), len(moved)),
    )
