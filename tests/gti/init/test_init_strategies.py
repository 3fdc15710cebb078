"""Row strategies: exact for the deterministic ones, statistical for the random ones."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from initworld import TEXTS, make_sids, make_tokenizer

from gti.init import REGISTRY, InitContext
from gti.init.config import ROW_STRATEGIES


def old_rows(V: int = 400, d: int = 8, seed: int = 0) -> torch.Tensor:
    """Anisotropic rows with an offset, like a real vocabulary (float64)."""
    g = torch.Generator().manual_seed(seed)
    scales = torch.linspace(0.3, 0.02, d, dtype=torch.float64)
    return torch.randn(V, d, generator=g, dtype=torch.float64) * scales + 0.05


def call(name: str, old: torch.Tensor, n_new: int, seed: int = 0, context=None) -> torch.Tensor:
    return REGISTRY[name](
        old=old,
        n_new=n_new,
        generator=torch.Generator().manual_seed(seed),
        context=context or InitContext(),
    )


def test_registry_holds_every_row_strategy():
    assert tuple(REGISTRY) == ROW_STRATEGIES


def test_mean_is_exact():
    old = old_rows().float()
    rows = call("mean", old, 7)
    assert rows.shape == (7, 8) and rows.dtype == old.dtype
    expected = old.double().mean(0).float()
    assert torch.equal(rows, expected.expand(7, -1))


def test_mean_noise_covariance_is_1e9_sigma():
    old = old_rows()
    rows = call("mean-noise", old, 40_000)  # (n, d)
    mu = old.mean(0)
    sigma = torch.cov(old.T, correction=0)
    emp = torch.cov(rows.T, correction=1)
    rel = torch.linalg.norm(emp / 1e-9 - sigma) / torch.linalg.norm(sigma)
    assert rel < 0.05  # sampling error of a 8x8 covariance from 40k draws is ~1%
    # the mean is the vocabulary's, to within the noise's standard error
    se = (1e-9 * sigma.diagonal() / rows.shape[0]).sqrt()
    assert ((rows.mean(0) - mu).abs() < 5 * se).all()


def test_mean_noise_survives_a_singular_covariance():
    old = old_rows(V=5, d=8)  # V < d: Sigma has rank 4
    rows = call("mean-noise", old, 100)
    assert torch.isfinite(rows).all()
    assert (rows - old.mean(0)).abs().max() < 1e-3


def test_random_std_matches_the_vocabulary():
    old = old_rows(d=16)
    rows = call("random", old, 20_000)
    sigma = old.std().item()
    assert rows.std().item() == pytest.approx(sigma, rel=0.02)
    assert abs(rows.mean().item()) < 5 * sigma / np.sqrt(rows.numel())
    assert not torch.equal(rows, call("random", old, 20_000, seed=1))
    assert torch.equal(rows, call("random", old, 20_000, seed=0))


def test_description_mean_equals_a_hand_computation():
    tok = make_tokenizer()
    sids = make_sids()
    texts = {f"m{i}": t for i, t in enumerate(TEXTS)}
    old = old_rows(V=len(tok), d=6)
    n_new = sum(lv.size for lv in sids.levels)
    rows = call(
        "description-mean",
        old,
        n_new,
        context=InitContext(sids=sids, item_texts=texts, tokenizer=tok),
    )

    table = old.numpy()
    item_vec = {}
    for item, text in texts.items():
        ids = tok(text, add_special_tokens=False)["input_ids"]
        item_vec[item] = np.mean([table[i] for i in ids], axis=0)
    fallback = np.mean(list(item_vec.values()), axis=0)
    expected = []
    for li, level in enumerate(sids.levels):
        for code in range(level.size):
            members = [item_vec[i] for i, c in sids.items.items() if c[li] == code]
            expected.append(np.mean(members, axis=0) if members else fallback)
    np.testing.assert_allclose(rows.numpy(), np.array(expected), rtol=1e-12, atol=1e-12)
    assert np.allclose(rows.numpy()[3], fallback)  # <a_3>: no item carries it


def test_presets_and_explicit_flags():
    from gti.init.config import GroundingConfig, apply_preset, preset_fields
    from gti.presets import grounding_preset

    # the paper's grounding setting, and the dataclass defaults
    paper = grounding_preset("paper")
    assert (paper["steps"], paper["batch_size"], paper["lr"]) == (8000, 128, 1e-3)
    g = GroundingConfig()
    assert (g.steps, g.batch_size, g.lr, g.optimizer, g.decay) == (8000, 128, 1e-3, "adamw", "none")
    cpu = apply_preset("cpu")
    assert set(cpu) == set(preset_fields()) and cpu.items() >= grounding_preset("cpu").items()
    assert (cpu["steps"], cpu["batch_size"], cpu["lr"]) == (74, 32, 5e-3)  # reports/grounding
    values = apply_preset("paper", steps=10, lr=5e-4, warmup_steps=None)
    assert (values["steps"], values["batch_size"], values["lr"]) == (10, 128, 5e-4)
    # a field the preset leaves out: the dataclass default, not None
    assert values["optimizer"] == "adamw" and values["warmup_steps"] == 0
    GroundingConfig(**values).validate()
