"""``full-covariance``: the draws' mean and covariance against numpy's of the original rows,
within bounds derived from the number of draws."""

from __future__ import annotations

import numpy as np
import torch
from test_init_strategies import call, old_rows

N_DRAWS = 20_000
Z = 5.0  # standard errors: 14 statistics checked, a false failure once in ~10^5 seeds


def test_draws_match_the_vocabulary_mean_and_covariance():
    old = old_rows(V=300, d=4).float()  # a planted anisotropic 4-dim vocabulary
    rows = call("full-covariance", old, N_DRAWS)
    assert rows.shape == (N_DRAWS, 4) and rows.dtype == old.dtype

    x = old.double().numpy()
    mu = x.mean(axis=0)
    sigma = np.cov(x, rowvar=False, bias=True)  # what the rows are drawn from
    r = rows.double().numpy()
    # mean: standard error sqrt(Sigma_jj / n) per coordinate
    se_mean = np.sqrt(np.diag(sigma) / N_DRAWS)
    assert (np.abs(r.mean(axis=0) - mu) < Z * se_mean).all()
    # covariance of Gaussian draws: Var(S_jk) = (Sigma_jj Sigma_kk + Sigma_jk^2) / n
    emp = np.cov(r, rowvar=False)
    se_cov = np.sqrt((np.outer(np.diag(sigma), np.diag(sigma)) + sigma**2) / N_DRAWS)
    assert (np.abs(emp - sigma) < Z * se_cov).all()
    # not the isotropic `random`: the planted anisotropy (std 0.3 vs 0.02) is there
    assert emp[0, 0] / emp[3, 3] > 50


def test_seeded_and_singular_covariance_stays_in_the_span():
    old = old_rows(V=4, d=8)  # V < d: the rows span a 3-dim affine subspace
    rows = call("full-covariance", old, 50)
    assert torch.equal(rows, call("full-covariance", old, 50))
    assert not torch.equal(rows, call("full-covariance", old, 50, seed=1))
    x = old.numpy()
    basis = np.linalg.svd(x - x.mean(0), full_matrices=False)[2][:3]  # (3, d)
    centered = rows.numpy() - x.mean(0)
    residual = centered - centered @ basis.T @ basis
    # off the span only through the square roots of rounding-level eigenvalues:
    # sqrt(eps * ||Sigma||) ~ 1e-9 against a spread of ~0.1
    assert np.abs(residual).max() < 1e-7 and np.abs(centered).max() > 1e-2
