"""The row optimizers of grounding: LazyAdam updates exactly the rows it is given."""

from __future__ import annotations

import pytest
import torch

from gti.init.optim import OPTIMIZERS, LazyAdam, make_row_optimizer, present_rows


def _run_lazy(grads: list[torch.Tensor], rows: list[list[int]], lr: float) -> torch.Tensor:
    p = torch.nn.Parameter(torch.zeros(3, 2, dtype=torch.float64))
    opt = LazyAdam([p], lr=lr)
    for g, r in zip(grads, rows, strict=True):
        p.grad = g.clone()
        opt.step(torch.tensor(r))
    return p.detach()


def test_lazy_adam_hand_computed_two_steps():
    lr, b1, b2 = 0.1, 0.9, 0.999
    g1 = torch.tensor([[1.0, -2.0], [5.0, 5.0], [0.5, 0.25]], dtype=torch.float64)
    g2 = torch.tensor([[3.0, 1.0], [-1.0, 4.0], [9.0, 9.0]], dtype=torch.float64)
    # Row 1 is absent at step 1 and row 2 at step 2: their (nonzero) gradients must not count.
    p = _run_lazy([g1, g2], [[0, 2], [0, 1]], lr)
    # By hand. A row's first occurrence: m_hat = g, v_hat = g^2, step = lr * sign(g).
    expected = torch.zeros(3, 2, dtype=torch.float64)
    expected[2] = -lr * torch.sign(g1[2])  # seen once (step 1)
    expected[1] = -lr * torch.sign(g2[1])  # seen once (step 2), its k = 1
    # Row 0, second occurrence: k = 2.
    m = b1 * (1 - b1) * g1[0] + (1 - b1) * g2[0]
    v = b2 * (1 - b2) * g1[0] ** 2 + (1 - b2) * g2[0] ** 2
    second = lr * (m / (1 - b1**2)) / ((v / (1 - b2**2)).sqrt() + 1e-8)
    expected[0] = -lr * torch.sign(g1[0]) - second
    # float64, two steps of a handful of operations: agreement to ~1e-15 relative;
    # eps = 1e-8 against |g| >= 0.25 moves a first step by at most 4e-8 of lr.
    torch.testing.assert_close(p, expected, rtol=0, atol=lr * 1e-7)


def test_lazy_adam_row_equals_its_own_adam():
    """Each row behaves as torch's Adam fed only the steps where the row is present."""
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(3, 2, generator=gen, dtype=torch.float64) for _ in range(6)]
    rows = [[0], [0, 1], [2], [0, 2], [1], [0, 1, 2]]
    p = _run_lazy(grads, rows, lr=0.01)
    for r in range(3):
        q = torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))
        ref = torch.optim.Adam([q], lr=0.01)
        for g, present in zip(grads, rows, strict=True):
            if r in present:
                q.grad = g[r].clone()
                ref.step()
        # Same float64 arithmetic in a different order: ~1e-16 per operation.
        torch.testing.assert_close(p[r], q.detach(), rtol=1e-12, atol=1e-15)


def test_lazy_adam_without_rows_is_adam():
    gen = torch.Generator().manual_seed(1)
    g = torch.randn(4, 3, generator=gen, dtype=torch.float64)
    p = torch.nn.Parameter(torch.ones(4, 3, dtype=torch.float64))
    q = torch.nn.Parameter(torch.ones(4, 3, dtype=torch.float64))
    lazy, adam = LazyAdam([p], lr=0.1), torch.optim.Adam([q], lr=0.1)
    for _ in range(3):
        p.grad, q.grad = g.clone(), g.clone()
        lazy.step()
        adam.step()
    torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-12, atol=1e-15)


def test_present_rows_are_the_new_tokens_of_the_batch():
    slot = torch.tensor([-1, -1, 0, 1, 2, -1])  # ids 2, 3, 4 are new rows 0, 1, 2
    ids = torch.tensor([[0, 4, 4, 1], [2, 5, 0, 0]])
    assert present_rows(ids, slot).tolist() == [0, 2]


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_every_optimizer_builds_and_steps(name):
    p = torch.nn.Parameter(torch.zeros(2, 2))
    opt = make_row_optimizer([p], name, lr=0.1)
    p.grad = torch.ones(2, 2)
    opt.step()
    assert (p.detach() < 0).all()  # every optimizer steps against a positive gradient


def test_unknown_optimizer_is_named():
    with pytest.raises(ValueError, match="unknown optimizer 'rmsprop'"):
        make_row_optimizer([torch.nn.Parameter(torch.zeros(1, 1))], "rmsprop", lr=0.1)
