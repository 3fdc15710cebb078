"""Fixtures of the init tests; the tiny world itself is built in initworld.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from initworld import World, build_world


@pytest.fixture
def world(tmp_path: Path) -> World:
    return build_world(tmp_path / "world")


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run faster on one thread, and two OpenMP threads on a busy 2-core
    machine spin against each other (100x slower matmuls, measured)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
