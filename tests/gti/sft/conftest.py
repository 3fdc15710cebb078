"""Fixtures of the SFT tests; the tiny world itself is built in sftworld.py."""

from __future__ import annotations

import pytest
import torch
from sftworld import World, build_world


@pytest.fixture(scope="session")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    """Read-only for the tests: each writes its checkpoints under its own tmp_path."""
    return build_world(tmp_path_factory.mktemp("sft-world"))


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run faster on one thread; two OpenMP threads on a busy 2-core
    machine spin against each other."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
