"""Fixtures of the evaluation tests: a tiny Llama with SID tokens (in memory), and a
checkpoint on disk over the synthetic catalog (for run_evaluate and the CLI)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from evalworld import SidModel, make_sid_model


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run faster on one thread; two OpenMP threads on a busy 2-core
    machine spin against each other."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def sid_model() -> SidModel:
    """float64: the decoding tests compare computations that differ only in summation
    order (test_evaluate_decode.ATOL says why float64 makes that comparison safe)."""
    return make_sid_model(dtype=torch.float64)


@pytest.fixture(scope="module")
def synthetic_checkpoint(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    """A `gti init --strategy random` checkpoint over the synthetic catalog."""
    from gti.init.config import InitConfig
    from gti.init.run import run_init
    from gti.semantic_ids.build import build_sids
    from gti.semantic_ids.config import RQVAEConfig, SidsConfig

    root = tmp_path_factory.mktemp("eval-world")
    rq = RQVAEConfig(codebook_size=8, epochs=3, hidden_dims=(32,), latent_dim=8, batch_size=64)
    build_sids(
        SidsConfig(
            data="synthetic",
            model=str(tiny_model_dir),
            out=root / "sids",
            encoder="bow",
            rqvae=rq,
            progress=False,
            cache_dir=root / "cache",
        )
    )
    return run_init(
        InitConfig(
            sids=root / "sids", out=root / "init", strategy="random", cache_dir=root / "cache"
        )
    )
