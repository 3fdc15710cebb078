"""The framework's own continuation from our output keeps every grounded row bit-exact into
its first SFT step: its tokenizer/model loading and token-adding code path, written from the
frameworks' documented steps (never copied), on a tiny model.

- LC-Rec ``finetune.py``: tokenizer from the model folder, ``pad_token_id = 0``,
  ``add_tokens(dataset.get_new_tokens())`` (the index's tokens, ``sorted(set(...))``),
  ``config.vocab_size = len(tokenizer)``, ``from_pretrained``, ``resize_token_embeddings``.
- MiniOneRec ``sft.py``: a token extender reading the ``.index.json``, ``add_tokens``, then
  ``resize_token_embeddings(len(tokenizer))`` on the loaded model.
- The PEFT route (``--adapter``): the base resized after ``add_tokens``, then
  ``PeftModel.from_pretrained(base, OUT, is_trainable=True)``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from gti.dropin.run import run_dropin
from gti.init.config import GroundingConfig, InitConfig


@pytest.fixture(scope="module")
def grounded(lcrec, lcrec_model, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("grounded") / "out"
    g = GroundingConfig(steps=4, batch_size=4, lr=1e-2, progress=False)
    cfg = InitConfig(
        out=out,
        sids=lcrec.index,
        items=lcrec.items,
        model=str(lcrec_model),
        grounding=g,
        strategy="gti",
        holdout=8,
    )
    # One thread, as the tests themselves run (conftest's one_thread is set up after a
    # module fixture): the adapter test compares its own run with this one bit for bit,
    # and a reduction split over two threads rounds differently.
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return run_dropin(cfg)
    finally:
        torch.set_num_threads(n)


def index_tokens(index: Path) -> list[str]:
    """What the frameworks' data classes collect: every token of every item, sorted."""
    return sorted({t for toks in json.loads(index.read_text()).values() for t in toks})


def saved_rows(out: Path, ids: list[int]) -> np.ndarray:
    return load_file(out / "model.safetensors")["model.embed_tokens.weight"][ids]


def lcrec_load(out: Path, index: Path):
    tokenizer = AutoTokenizer.from_pretrained(out, padding_side="right")
    tokenizer.pad_token_id = 0
    added = tokenizer.add_tokens(index_tokens(index))
    config = AutoConfig.from_pretrained(out)
    config.vocab_size = len(tokenizer)
    model = AutoModelForCausalLM.from_pretrained(out, config=config)
    model.resize_token_embeddings(len(tokenizer))
    return tokenizer, model, added


def minionerec_load(out: Path, index: Path):
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    added = tokenizer.add_tokens(index_tokens(index))
    model.resize_token_embeddings(len(tokenizer))
    return tokenizer, model, added


def first_step_rows(model, tokenizer, sid: str, ids: list[int]) -> np.ndarray:
    """The new rows as the first SFT step's forward reads them, and that step taken."""
    seen = {}

    def hook(module, args):
        seen.setdefault("rows", module.weight.detach()[ids].clone().numpy())

    handle = model.get_input_embeddings().register_forward_pre_hook(hook)
    model.train()
    batch = tokenizer(f"Response: {sid}", return_tensors="pt")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loss = model(**batch, labels=batch["input_ids"]).loss
    loss.backward()
    optimizer.step()
    handle.remove()
    return seen["rows"]


@pytest.mark.parametrize("load", [lcrec_load, minionerec_load], ids=["lcrec", "minionerec"])
def test_the_framework_continues_from_the_grounded_rows(grounded, lcrec, load):
    tokenizer, model, added = load(grounded, lcrec.index)
    assert added == 0  # the framework's own add_tokens finds every token present
    ids = tokenizer.convert_tokens_to_ids(index_tokens(lcrec.index))
    assert model.get_input_embeddings().weight.shape[0] == len(tokenizer)  # no row added
    item, tokens = next(iter(json.loads(lcrec.index.read_text()).items()))
    rows = first_step_rows(model, tokenizer, "".join(tokens), ids)
    assert np.array_equal(rows, saved_rows(grounded, ids))  # bit-exact
    base_rows = load_file(
        Path(json.loads((grounded / "init_config.json").read_text())["model"]) / "model.safetensors"
    )
    assert not np.array_equal(
        rows, np.repeat(base_rows["model.embed_tokens.weight"].mean(0, keepdims=True), len(ids), 0)
    )


def test_the_adapter_route_loads_the_same_rows_over_the_untouched_base(
    lcrec, lcrec_model, grounded, tmp_path
):
    from peft import PeftModel

    g = GroundingConfig(steps=4, batch_size=4, lr=1e-2, progress=False)
    cfg = InitConfig(
        out=tmp_path / "adapter",
        sids=lcrec.index,
        items=lcrec.items,
        model=str(lcrec_model),
        grounding=g,
        strategy="gti",
        holdout=8,
        adapter=True,
    )
    out = run_dropin(cfg)
    assert {"adapter_config.json", "adapter_model.safetensors"} <= {p.name for p in out.iterdir()}
    assert "model.safetensors" not in {p.name for p in out.iterdir()}
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.add_tokens(index_tokens(lcrec.index)) == 0
    base = AutoModelForCausalLM.from_pretrained(lcrec_model)
    base.resize_token_embeddings(len(tokenizer))
    model = PeftModel.from_pretrained(base, out, is_trainable=True)
    ids = tokenizer.convert_tokens_to_ids(index_tokens(lcrec.index))
    rows = model.get_input_embeddings()(torch.tensor([ids]))[0].detach().numpy()
    # The same seed and settings as the full-model run: the same grounded rows.
    assert np.array_equal(rows, saved_rows(grounded, ids))
