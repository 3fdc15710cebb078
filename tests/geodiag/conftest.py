"""Fixtures for geodiag tests; the checkpoint builders live in geodiag_fixtures.py and the
tiny transformers models in tiny_models.py (unique module names: several test folders
have a conftest.py, and `from conftest import ...` would resolve to whichever was
imported first)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from geodiag_fixtures import base_rows, planted_new_rows, write_checkpoint
from tiny_models import save, tiny_lm


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


@pytest.fixture
def tiny_lm_dir(tmp_path):
    """tiny_lm_dir(vocab_size, name=..., tokenizer=..., **tiny_lm options) -> the folder of a
    freshly built tiny model (and its tokenizer), as save_pretrained writes it."""

    def _make(vocab_size: int, name: str = "tiny", tokenizer=None, **kw) -> Path:
        return save(tiny_lm(vocab_size, **kw), tmp_path / name, tokenizer)

    return _make


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """geodiag's wheel, built once a session from a copy of the tree (test_wheel.py)."""
    from test_wheel import build_wheel

    return build_wheel(tmp_path_factory)


@pytest.fixture(autouse=True)
def no_hub_login(tmp_path, monkeypatch):
    """No test reads this machine's Hub login: hf:// sends the token of `hf auth login`
    (geodiag.io.sources.hub_auth), so its home is an empty folder unless a test writes one."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    for name in (
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "HF_TOKEN_PATH",
        "HF_HUB_DISABLE_IMPLICIT_TOKEN",
    ):
        monkeypatch.delenv(name, raising=False)
