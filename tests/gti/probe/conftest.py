"""Fixtures of the probe tests: the 12-item tiny world of tests/gti/tinyworld.py (3-level
SIDs, a catalog, a word-level tokenizer covering its texts and the prompt templates, a
2-layer Llama) and a mean-init checkpoint `gti init` writes of it (seconds, offline)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tinyworld import TEXTS, make_sids, write_catalog, write_sids_dir

from gti.models.tiny import build_tiny_tokenizer, tiny_config
from gti.prompts import SID_TO_TEXT, TEXT_TO_SID


@pytest.fixture(scope="session")
def mean_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untied tiny model with the world's SIDs, every new row at the mean."""
    import torch
    from transformers import LlamaForCausalLM

    from gti.init.config import InitConfig
    from gti.init.run import run_init

    root = tmp_path_factory.mktemp("probe-world")
    tokenizer = build_tiny_tokenizer([*TEXTS, *TEXT_TO_SID, *SID_TO_TEXT])
    config = tiny_config(tokenizer)
    config.tie_word_embeddings = False  # the planted test sets the output rows alone
    torch.manual_seed(0)
    model_dir = root / "model"
    LlamaForCausalLM(config).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    data = write_catalog(root, [f"u{i % 3},m{i},{i}" for i in range(12)])
    sids_dir = write_sids_dir(root, make_sids({"source_model": str(model_dir), "data": data}))
    out = root / "mean"
    run_init(InitConfig(out=out, sids=sids_dir, strategy="mean", device="cpu"))
    return out
