"""Optimizers for the new rows, and which rows a batch touches.

With a tied head every new row gets a gradient at every answer position through
the softmax normaliser, however rarely its token occurs. Those gradients are
tiny, but Adam divides by their own RMS and turns them into full-size steps, so
every row moves every step, mostly along one common direction (measured:
reports/grounding/README.md). ``LazyAdam`` keeps Adam's per-coordinate scaling for the
rows that occur in the batch (as input or as target) and leaves every other row,
and its moments, untouched: each row is its own Adam over the steps in which it
occurs, bias correction counted in those steps.
"""

from __future__ import annotations

import torch

from gti.init.config import OPTIMIZERS


def present_rows(input_ids: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
    """Sorted unique rows of ``E_new`` whose tokens occur in ``input_ids`` (B, T).

    Targets are inputs too (teacher forcing), so this covers both roles; padding
    is never a new token.
    """
    s = slot[input_ids.reshape(-1)]
    return torch.unique(s[s >= 0])


class LazyAdam(torch.optim.Optimizer):
    """Adam on the rows of one (n, d) parameter that ``step(rows)`` names.

    For a present row r at its k-th occurrence (k counted per row):
    ``m_r = b1 m_r + (1 - b1) g_r``, ``v_r = b2 v_r + (1 - b2) g_r^2``,
    ``p_r -= lr * (m_r / (1 - b1^k)) / (sqrt(v_r / (1 - b2^k)) + eps)``.
    Absent rows keep their values and their moments; no weight decay.
    """

    def __init__(
        self,
        params: list[torch.nn.Parameter],
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps})
        for group in self.param_groups:
            for p in group["params"]:
                if p.dim() != 2:
                    raise ValueError(f"LazyAdam updates rows of 2-D tensors, got {tuple(p.shape)}")

    @torch.no_grad()
    def step(self, rows: torch.Tensor | None = None) -> None:  # type: ignore[override]
        """Update ``rows`` (1-D long, unique) of every parameter; ``None``: all rows."""
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                    state["row_step"] = torch.zeros(p.shape[0], dtype=torch.long, device=p.device)
                r = torch.arange(p.shape[0], device=p.device) if rows is None else rows
                g = p.grad[r]  # (k, d)
                m = state["exp_avg"][r].mul_(b1).add_(g, alpha=1 - b1)
                v = state["exp_avg_sq"][r].mul_(b2).addcmul_(g, g, value=1 - b2)
                k = state["row_step"][r] + 1  # (k,)
                state["exp_avg"][r] = m
                state["exp_avg_sq"][r] = v
                state["row_step"][r] = k
                c1 = 1 - b1 ** k.to(p.dtype)[:, None]  # (k, 1)
                c2 = 1 - b2 ** k.to(p.dtype)[:, None]
                p[r] -= group["lr"] * (m / c1) / ((v / c2).sqrt() + group["eps"])


def make_row_optimizer(
    params: list[torch.nn.Parameter],
    name: str,
    *,
    lr: float,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
) -> torch.optim.Optimizer:
    """The optimizer ``name`` (one of ``OPTIMIZERS``) over the new rows."""
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    if name == "lazy-adam":
        return LazyAdam(params, lr=lr, betas=betas, eps=eps)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=weight_decay)
    if name == "adagrad":
        return torch.optim.Adagrad(params, lr=lr, eps=eps, weight_decay=weight_decay)
    raise ValueError(f"unknown optimizer {name!r}; choose from {', '.join(OPTIMIZERS)}")
