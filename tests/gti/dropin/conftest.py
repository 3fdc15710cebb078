"""Fixtures of the drop-in tests: an LC-Rec-format dataset (``lcrec_world``, a few thousand
items, written as LC-Rec writes it) and a tiny local model whose word-level tokenizer covers
its texts and the prompt templates."""

from __future__ import annotations

from pathlib import Path

import pytest
from lcrec_world import LcRecWorld, write_lcrec

from gti.prompts import SID_TO_TEXT, TEXT_TO_SID


@pytest.fixture(scope="session")
def lcrec(tmp_path_factory: pytest.TempPathFactory) -> LcRecWorld:
    return write_lcrec(tmp_path_factory.mktemp("lcrec"))


@pytest.fixture(scope="session")
def lcrec_model(tmp_path_factory: pytest.TempPathFactory, lcrec: LcRecWorld) -> Path:
    from gti.models.tiny import save_tiny

    corpus = lcrec.texts() + list(TEXT_TO_SID) + list(SID_TO_TEXT)
    return save_tiny(tmp_path_factory.mktemp("tiny-lcrec"), corpus, seed=0)
