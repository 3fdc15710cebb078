"""Seeded k-means (k-means++ seeding, Lloyd iterations) for codebook initialization."""

from __future__ import annotations

import torch


def sq_distances(x: torch.Tensor, centers: torch.Tensor) -> torch.Tensor:
    """(n, k) squared Euclidean distances between rows of x (n, d) and centers (k, d)."""
    return (
        x.pow(2).sum(1, keepdim=True) - 2 * x @ centers.T + centers.pow(2).sum(1)[None, :]
    ).clamp_min(0)


def kmeans_pp_init(x: torch.Tensor, k: int, generator: torch.Generator) -> torch.Tensor:
    """k-means++ seeding: each new center drawn with probability ~ squared distance."""
    n = x.shape[0]
    centers = [x[torch.randint(n, (1,), generator=generator)].squeeze(0)]
    closest = sq_distances(x, centers[0][None]).squeeze(1)  # (n,)
    for _ in range(1, k):
        total = closest.sum()
        if total <= 0:  # fewer distinct points than k: pick uniformly among all
            idx = torch.randint(n, (1,), generator=generator)
        else:
            idx = torch.multinomial(closest / total, 1, generator=generator)
        centers.append(x[idx].squeeze(0))
        closest = torch.minimum(closest, sq_distances(x, x[idx]).squeeze(1))
    return torch.stack(centers)


def kmeans(x: torch.Tensor, k: int, generator: torch.Generator, n_iter: int = 25) -> torch.Tensor:
    """(k, d) centers of x (n, d), n >= k. An emptied cluster is moved onto the point
    worst served by the current centers, so all k centers stay in use."""
    if x.shape[0] < k:
        raise ValueError(f"k-means needs at least k={k} points, got {x.shape[0]}")
    x = x.detach().float()
    centers = kmeans_pp_init(x, k, generator)
    for _ in range(n_iter):
        dist = sq_distances(x, centers)  # (n, k)
        assign = dist.argmin(1)
        counts = torch.bincount(assign, minlength=k)
        sums = torch.zeros_like(centers).index_add_(0, assign, x)
        new = sums / counts.clamp_min(1)[:, None].to(x.dtype)
        empty = (counts == 0).nonzero().flatten()
        if len(empty):
            worst = dist.min(1).values.argsort(descending=True)[: len(empty)]
            new[empty] = x[worst]
        if torch.allclose(new, centers):
            break
        centers = new
    return centers
