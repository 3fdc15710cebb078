"""Drift of the same tokens between two checkpoints: per-token cosine and kept structure."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from geodiag.metrics.geometry import as_matrix, row_norms
from geodiag.metrics.rsa import RSAResult, rsa

_QUANTILES = {"p10": 0.10, "p25": 0.25, "p75": 0.75, "p90": 0.90}


@dataclass(frozen=True)
class DriftResult:
    n_tokens: int
    per_token_cosine: list[float | None]  # cos(a_i, b_i) in token order; None for a zero row
    cosine_mean: float | None  # summary statistics over the defined cosines
    cosine_median: float | None
    cosine_min: float | None
    cosine_quantiles: dict[str, float | None]  # "p10", "p25", "p75", "p90"
    relative_change: float | None  # ||b - a||_F / ||a||_F; None when a is all zero
    structure_rsa: RSAResult  # RSA of a's and b's dissimilarities: does the structure survive?
    undefined_reason: str | None = None  # why some cosines are None


def drift(
    a: np.ndarray,
    b: np.ndarray,
    *,
    n_permutations: int = 1000,
    seed: int = 0,
    max_items: int = 1000,
) -> DriftResult:
    """How far each token row moved from a (n, d) to b (n, d), and whether the pairwise
    structure of a survives in b (RSA, see :func:`geodiag.metrics.rsa.rsa`)."""
    a = as_matrix(a, "a")
    b = as_matrix(b, "b")
    if a.shape != b.shape:
        raise ValueError(f"drift needs matrices of the same shape: a is {a.shape}, b is {b.shape}")
    na, nb = row_norms(a), row_norms(b)
    ok = (na > 0) & (nb > 0)
    cos = np.full(a.shape[0], np.nan)
    cos[ok] = np.clip(np.einsum("ij,ij->i", a[ok], b[ok]) / (na[ok] * nb[ok]), -1.0, 1.0)
    per_token: list[float | None] = [float(c) if k else None for c, k in zip(cos, ok, strict=True)]
    reason = None
    if not ok.all():
        reason = (
            f"{int((~ok).sum())} token(s) have a zero row in a or b: their cosine is None "
            "and left out of the summary statistics"
        )
    defined = cos[ok]
    if defined.size:
        stats = (float(defined.mean()), float(np.median(defined)), float(defined.min()))
        quantiles = {k: float(np.quantile(defined, q)) for k, q in _QUANTILES.items()}
    else:
        stats = (None, None, None)
        quantiles = {k: None for k in _QUANTILES}
    a_norm = float(np.linalg.norm(a))
    relative = float(np.linalg.norm(b - a)) / a_norm if a_norm > 0 else None
    return DriftResult(
        n_tokens=int(a.shape[0]),
        per_token_cosine=per_token,
        cosine_mean=stats[0],
        cosine_median=stats[1],
        cosine_min=stats[2],
        cosine_quantiles=quantiles,
        relative_change=relative,
        structure_rsa=rsa(
            a,
            b,
            n_permutations=n_permutations,
            seed=seed,
            max_items=max_items,
            names=("the first checkpoint", "the second checkpoint"),
        ),
        undefined_reason=reason,
    )
