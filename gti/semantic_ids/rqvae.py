"""Residual-quantized VAE (TIGER, Rajput et al. 2023): content embedding -> L codes.

The encoder maps an item embedding to a latent z; level 1 quantizes z to its
nearest codebook vector, level 2 quantizes what is left (the residual), and so
on, so the first code is the coarsest. Training minimizes reconstruction error
plus, per level, the VQ-VAE codebook and commitment losses, with the
straight-through estimator carrying gradients past the argmin.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from tqdm import tqdm

from gti.semantic_ids.config import RQVAEConfig
from gti.semantic_ids.kmeans import kmeans, sq_distances

log = logging.getLogger(__name__)


def _mlp(dims: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
        layers.append(nn.Linear(a, b))
        if i < len(dims) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


@dataclass
class Quantized:
    z_q: torch.Tensor  # (B, D) sum of the chosen code vectors
    codes: torch.Tensor  # (B, L) long
    residuals: list[torch.Tensor]  # L x (B, D): what level l quantized
    vq_loss: torch.Tensor  # codebook + beta * commitment, summed over levels


class RQVAE(nn.Module):
    def __init__(self, in_dim: int, cfg: RQVAEConfig) -> None:
        super().__init__()
        self.encoder = _mlp([in_dim, *cfg.hidden_dims, cfg.latent_dim])
        self.decoder = _mlp([cfg.latent_dim, *reversed(cfg.hidden_dims), in_dim])
        self.codebooks = nn.ParameterList(
            nn.Parameter(torch.zeros(cfg.codebook_size, cfg.latent_dim))
            for _ in range(cfg.n_levels)
        )
        self.beta = cfg.beta

    def quantize(self, z: torch.Tensor) -> Quantized:
        residual, z_q = z, torch.zeros_like(z)
        codes, residuals, vq_loss = [], [], z.new_zeros(())
        for book in self.codebooks:
            idx = sq_distances(residual, book).argmin(1)  # (B,)
            q = book[idx]  # (B, D)
            vq_loss = (
                vq_loss
                + F.mse_loss(q, residual.detach())
                + self.beta * F.mse_loss(residual, q.detach())
            )
            codes.append(idx)
            residuals.append(residual)
            z_q = z_q + q
            residual = residual - q.detach()
        return Quantized(z_q, torch.stack(codes, 1), residuals, vq_loss)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, Quantized]:
        z = self.encoder(x)  # (B, D)
        quant = self.quantize(z)
        z_st = z + (quant.z_q - z).detach()  # straight-through: decoder grads reach the encoder
        return self.decoder(z_st), quant

    @torch.no_grad()
    def init_codebooks(self, x: torch.Tensor, generator: torch.Generator, n_iter: int) -> None:
        """k-means on each level's residuals of ``x``, level by level."""
        residual = self.encoder(x)
        for book in self.codebooks:
            book.copy_(kmeans(residual, book.shape[0], generator, n_iter))
            residual = residual - book[sq_distances(residual, book).argmin(1)]


@dataclass
class RQVAEResult:
    codes: np.ndarray  # (n, L) int64
    last_residuals: np.ndarray  # (n, D): input of the last level (for collision re-assignment)
    codebooks: list[np.ndarray]  # L x (K, D) float32
    history: list[dict[str, float]] = field(default_factory=list)  # per-epoch losses and usage
    model: RQVAE | None = None


@torch.no_grad()
def encode_all(model: RQVAE, x: torch.Tensor, batch_size: int = 4096) -> Quantized:
    model.eval()
    parts = [
        model.quantize(model.encoder(x[i : i + batch_size])) for i in range(0, len(x), batch_size)
    ]
    model.train()
    return Quantized(
        torch.cat([p.z_q for p in parts]),
        torch.cat([p.codes for p in parts]),
        [torch.cat([p.residuals[lv] for p in parts]) for lv in range(len(model.codebooks))],
        torch.zeros(()),
    )


@torch.no_grad()
def reseed_dead_codes(model: RQVAE, quant: Quantized, generator: torch.Generator) -> int:
    """Move every code no item chose onto a random item's residual at that level."""
    n_reseeded = 0
    for lv, book in enumerate(model.codebooks):
        used = torch.bincount(quant.codes[:, lv], minlength=book.shape[0]) > 0
        dead = (~used).nonzero().flatten()
        if len(dead):
            pick = torch.randint(len(quant.residuals[lv]), (len(dead),), generator=generator)
            book[dead] = quant.residuals[lv][pick]
            n_reseeded += len(dead)
    return n_reseeded


def standardize(x: np.ndarray) -> np.ndarray:
    mean, std = x.mean(0, keepdims=True), x.std(0, keepdims=True)
    return (x - mean) / np.where(std > 1e-8, std, 1.0)


def train_rqvae(embeddings: np.ndarray, cfg: RQVAEConfig, progress: bool = True) -> RQVAEResult:
    """Fit an RQ-VAE on (n, d) embeddings and read off every item's codes.

    Deterministic under ``cfg.seed``: weights come from a forked, seeded global RNG,
    and shuffling, k-means and re-seeding draw from one explicit generator. The
    thread count is fixed too, since it can change float summation order.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.n_threads)
    try:
        return _train(embeddings, cfg, progress)
    finally:
        torch.set_num_threads(threads)


def _train(embeddings: np.ndarray, cfg: RQVAEConfig, progress: bool) -> RQVAEResult:
    n = embeddings.shape[0]
    if n < cfg.codebook_size:
        raise ValueError(f"{n} items < codebook size {cfg.codebook_size}")
    x_np = standardize(embeddings) if cfg.standardize else embeddings
    x = torch.as_tensor(np.ascontiguousarray(x_np), dtype=torch.float32)
    gen = torch.Generator().manual_seed(cfg.seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = RQVAE(x.shape[1], cfg)
    # fused: one kernel per step instead of ~10 per tensor; the loop is overhead-bound on CPU
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, fused=True)
    batch_size = min(max(cfg.batch_size, cfg.codebook_size), n)
    reseed_epochs = int(cfg.reseed_until * cfg.epochs)
    history: list[dict[str, float]] = []
    for epoch in tqdm(
        range(cfg.epochs), desc="training RQ-VAE", unit="epoch", disable=not progress
    ):
        perm = torch.randperm(n, generator=gen)
        if epoch == 0:
            model.init_codebooks(x[perm[:batch_size]], gen, cfg.kmeans_iters)
        recon_sum, vq_sum, steps = 0.0, 0.0, 0
        for i in range(0, n, batch_size):
            xb = x[perm[i : i + batch_size]]  # (B, d)
            x_hat, quant = model(xb)
            recon = F.mse_loss(x_hat, xb)
            loss = recon + quant.vq_loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            recon_sum, vq_sum, steps = (
                recon_sum + recon.item(),
                vq_sum + quant.vq_loss.item(),
                steps + 1,
            )
        record = {"epoch": epoch, "recon_loss": recon_sum / steps, "vq_loss": vq_sum / steps}
        if epoch < reseed_epochs:  # re-encoding everything costs a step's worth; only when needed
            quant = encode_all(model, x)
            record["reseeded"] = reseed_dead_codes(model, quant, gen)
            record["unique_fraction"] = len(torch.unique(quant.codes, dim=0)) / n
        history.append(record)
    quant = encode_all(model, x)
    return RQVAEResult(
        codes=quant.codes.numpy().astype(np.int64),
        last_residuals=quant.residuals[-1].numpy(),
        codebooks=[b.detach().numpy().astype(np.float32).copy() for b in model.codebooks],
        history=history,
        model=model,
    )
