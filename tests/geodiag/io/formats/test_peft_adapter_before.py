"""A PEFT adapter folder's before (geodiag.io.formats.peft_adapter.before) as the reference of its
new rows, on adapters PEFT writes through a fine-tuning framework's LoRA path.

The path, as LLaMA-Factory and axolotl take it: the base saved without the new tokens;
the framework loads it, adds the tokens and resizes the embedding in memory, wraps it with
``get_peft_model`` (``modules_to_save`` over ``embed_tokens`` and ``lm_head``, over
``embed_tokens`` alone, or ``trainable_token_indices``), runs real AdamW steps on batches
that hold only USED new tokens, and saves with ``save_pretrained``. PEFT (0.17 and
later) then stores each copy's ``original_module.weight`` beside it, and under trainable
tokens the resized ``token_adapter.base_layer.weight``. AdamW with weight decay 0 leaves a
row without gradient bit-identical to its before: the UNUSED rows of the input embedding.
An untied head's rows all get gradient through the softmax, as does a tied head's shared
trainable-tokens delta, so they all move.

The new rows are drawn like the vocabulary's rows, so no finding but the movement can tell
the UNUSED ones untrained. Tolerance: geodiag's barely-moved rule (a row that did not move
at all is always flagged; below MOVED_FRACTION x the original rows' median movement too);
the expectation here is computed independently, from the saved tensors with numpy: the
new rows bit-identical to their before.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tiny_models import tiny_lm, word_tokenizer
from typer.testing import CliRunner

from geodiag.cli import app

pytestmark = pytest.mark.filterwarnings("ignore")  # PEFT's and transformers' own advice

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

N_WORDS, N_NEW = 100, 10
V0 = N_WORDS + 1  # <unk>, then the words
NEW = list(range(V0, V0 + N_NEW))
USED, UNUSED = NEW[:6], NEW[6:]
PREFIX = "base_model.model."

CONFIGS = {
    "embed+head": dict(modules_to_save=["embed_tokens", "lm_head"]),
    "embed": dict(modules_to_save=["embed_tokens"]),
    "tokens": dict(trainable_token_indices={"embed_tokens": NEW}),
}


def _framework_adapter(root: Path, tied: bool, kind: str, fed: list[int]) -> tuple[Path, Path]:
    """(base, adapter): ``kind`` of CONFIGS trained 3 AdamW steps on batches feeding ``fed``."""
    tok = word_tokenizer(N_WORDS)
    base = root / "base"
    tiny_lm(len(tok), tied=tied, seed=0).save_pretrained(base)
    tok.save_pretrained(base)
    # The framework's side: load, extend, resize, wrap, train, save.
    model = transformers.AutoModelForCausalLM.from_pretrained(base)
    tok.add_tokens([f"<a_{i}>" for i in range(N_NEW)])
    model.resize_token_embeddings(len(tok), mean_resizing=False)
    with torch.no_grad():  # the new rows drawn like the vocabulary's
        g = torch.Generator().manual_seed(1)
        matrices = (model.get_input_embeddings().weight, model.lm_head.weight)
        for w in {x.data_ptr(): x for x in matrices}.values():  # a tied one once
            w[V0:] = torch.randn(w[V0:].shape, generator=g) * w[:V0].std()
    config = peft.LoraConfig(r=4, target_modules=["q_proj"], **CONFIGS[kind])
    pm = peft.get_peft_model(model, config)
    opt = torch.optim.AdamW(
        [p for p in pm.parameters() if p.requires_grad], lr=1e-2, weight_decay=0.0
    )
    for step in range(3):
        g = torch.Generator().manual_seed(step)
        words = torch.randint(1, V0, (4, 6), generator=g)
        # The fed tokens first: the last position's input row gets no gradient (no label).
        x = torch.cat([torch.tensor(fed).repeat(4, 1), words], dim=1)
        pm(input_ids=x, labels=x).loss.backward()
        opt.step()
        opt.zero_grad()
    adapter = root / "adapter"
    pm.save_pretrained(adapter)
    tok.save_pretrained(adapter)
    return base, adapter


def _bit_identical(adapter: Path, module: str) -> set[int]:
    """New rows of ``module`` equal to their before, read from the saved tensors by numpy."""
    t = safetensors_numpy.load_file(adapter / "adapter_model.safetensors")
    key = f"{PREFIX}{module}"
    if f"{key}.original_module.weight" in t:
        now, then = t[f"{key}.modules_to_save.weight"], t[f"{key}.original_module.weight"]
    else:  # trainable tokens: the delta holds the new values of the indexed rows
        then = t[f"{key}.token_adapter.base_layer.weight"][NEW]
        now = t[f"{key}.token_adapter.trainable_tokens_delta"]
        return {NEW[i] for i in np.flatnonzero((now == then).all(axis=1))}
    return {i for i in NEW if (now[i] == then[i]).all()}


def _check(adapter: Path, base: Path) -> tuple[int, dict, str]:
    """(check's exit code, metrics' JSON, check's text)."""
    runner = CliRunner()
    res = runner.invoke(app, ["metrics", str(adapter), "--base", str(base), "--json"])
    assert res.exit_code == 0, res.output
    text = runner.invoke(app, ["check", str(adapter), "--base", str(base)])
    return text.exit_code, json.loads(res.stdout), text.output


def _barely_moved(doc: dict) -> dict[str, set[int]]:
    out = {}
    for m in doc["matrices"]:
        tokens = m["untrained"]["tokens"]
        out[m["role"]] = {t["id"] for t in tokens if "barely_moved" in t["findings"]}
    return out


@pytest.mark.parametrize("kind", list(CONFIGS))
@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_rows_that_never_trained_fail_against_the_saved_before(tmp_path, tied, kind):
    base, adapter = _framework_adapter(tmp_path, tied, kind, USED)
    identical = _bit_identical(adapter, "model.embed_tokens")
    # Every input row the batches never fed kept its value, except through a tied head's
    # shared trainable-tokens delta, which the softmax trains for every row.
    assert identical == (set() if tied and kind == "tokens" else set(UNUSED))
    code, doc, text = _check(adapter, base)
    assert _barely_moved(doc)["input"] == identical
    assert all(not ids for role, ids in _barely_moved(doc).items() if role != "input")
    before = "base_layer" if kind == "tokens" else "original_module"
    if identical:
        assert code == 1
        line = next(line for line in text.splitlines() if "n_untrained" in line)
        # bit-identical to the before: "never left"; the verdict names the file in full
        assert f"never left the reference: {before} in" in line
        verdict = next(ln for ln in text.splitlines() if ln.strip().startswith("verdict:"))
        assert f"{before} in {adapter / 'adapter_model.safetensors'}" in verdict
        assert any(
            ln.strip().startswith("reference: the adapter's before") for ln in text.splitlines()
        )
        assert all(f"<a_{i - V0}>" in line for i in identical)
    else:  # the tied head trained every row of the shared delta: nothing to flag
        assert code == 0, text
    assert doc["reference"] == f"{before} in {adapter / 'adapter_model.safetensors'}"


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_an_adapter_that_fed_every_new_token_flags_none(tmp_path, tied):
    base, adapter = _framework_adapter(tmp_path, tied, "embed+head", NEW)
    assert _bit_identical(adapter, "model.embed_tokens") == set()
    code, doc, _ = _check(adapter, base)
    assert code == 0 and _barely_moved(doc) == {"input": set(), "output": set()}


def test_without_original_module_the_base_is_the_before(tmp_path):
    """An adapter over a base saved already extended: PEFT stores the copy alone (nothing was
    resized in memory), and the base's own tensor is the copy's before."""
    base, adapter = _framework_adapter(tmp_path, False, "embed", USED)
    merged = transformers.AutoModelForCausalLM.from_pretrained(base)
    t = safetensors_numpy.load_file(adapter / "adapter_model.safetensors")
    merged.resize_token_embeddings(V0 + N_NEW, mean_resizing=False)
    with torch.no_grad():  # the extended base as the user saved it before training
        original = torch.from_numpy(t[f"{PREFIX}model.embed_tokens.original_module.weight"])
        merged.get_input_embeddings().weight.copy_(original)
    extended = tmp_path / "extended"
    merged.save_pretrained(extended)
    kept = {k: v for k, v in t.items() if "original_module" not in k and "modules_to_save" not in k}
    safetensors_numpy.save_file(kept, adapter / "adapter_model.safetensors")
    code, doc, _ = _check(adapter, extended)
    assert doc["reference"] == f"the base {extended}"
    assert _barely_moved(doc)["input"] == set(UNUSED) and code == 1
