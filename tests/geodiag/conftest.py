"""Fixtures for geodiag tests; the checkpoint builders live in geodiag_fixtures.py
(a unique module name: several test folders have a conftest.py, and `from conftest
import ...` would resolve to whichever was imported first)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from geodiag_fixtures import base_rows, planted_new_rows, write_checkpoint


@pytest.fixture
def make_ckpt(tmp_path):
    """make_ckpt(kind or rows, name=..., **write_checkpoint options) -> folder."""

    def _make(kind: str | np.ndarray = "random", name: str | None = None, **kw) -> Path:
        base = kw.pop("base", None)
        base = base_rows() if base is None else base
        rows = planted_new_rows(kind, base) if isinstance(kind, str) else kind
        label = name or (kind if isinstance(kind, str) else "custom")
        return write_checkpoint(tmp_path / label, rows, base=base, **kw)

    return _make
