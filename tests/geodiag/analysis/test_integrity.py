"""Integrity findings on checkpoints written by transformers and PEFT themselves.

Padding rows come from ``resize_token_embeddings(pad_to_multiple_of=...)``; the stored
heads a merge tool leaves beside a tied embedding are planted into the file transformers
wrote; adapters are PEFT's own."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from geodiag_fixtures import tokenizer_json
from tiny_models import tiny_lm
from typer.testing import CliRunner

from geodiag.cli import app
from geodiag.io.formats.safetensors import SafetensorsFile, save_file

pytestmark = pytest.mark.filterwarnings("ignore")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

V0, D, N_NEW = 48, 16, 6
NEW = list(range(V0, V0 + N_NEW))
NAMES = [f"<a_{i}>" for i in range(N_NEW)]


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def _model(tied: bool, kind: str = "llama"):
    # head_dim: Gemma's default (256) is not hidden / heads
    model = tiny_lm(V0, hidden_size=D, head_dim=8, tied=tied, seed=0, arch=kind)
    with torch.no_grad():  # new rows that look trained: distinct, at the vocabulary's scale
        model.resize_token_embeddings(V0 + N_NEW, mean_resizing=False)
        emb = model.get_input_embeddings().weight
        emb[V0:] = torch.randn(N_NEW, D, generator=torch.Generator().manual_seed(1)) * emb.std()
    return model


def _save(model, root: Path) -> Path:
    model.save_pretrained(root)
    (root / "tokenizer.json").write_text(json.dumps(tokenizer_json(V0, NAMES)))
    return root


def _findings(path, *args) -> dict:
    res = run("metrics", path, "--json", "--permutations", 0, "--neighbors", 0, *args)
    assert res.exit_code == 0, res.output
    return {f["kind"]: f for f in json.loads(res.stdout)["integrity"]}


def _plant_head(root: Path, head: np.ndarray) -> None:
    f = SafetensorsFile(root / "model.safetensors")
    tensors = {name: f.read(name).astype(np.float32) for name in f.tensors}
    tensors["lm_head.weight"] = head.astype(np.float32)
    save_file(tensors, root / "model.safetensors")


def test_a_healthy_tied_checkpoint_has_no_findings(tmp_path):
    assert _findings(_save(_model(tied=True), tmp_path / "ok")) == {}


def test_tied_config_with_a_stored_head_that_differs(tmp_path):
    root = _save(_model(tied=True), tmp_path / "tied")
    emb = SafetensorsFile(root / "model.safetensors").read("model.embed_tokens.weight")
    _plant_head(root, emb)  # a faithful copy: nothing to say
    assert "tied_head_differs" not in _findings(root)
    head = emb.copy()
    head[[NEW[1], NEW[4]]] += 0.01
    _plant_head(root, head)
    f = _findings(root)["tied_head_differs"]
    assert f["status"] == "warn" and f["tokens"]["ids"] == [NEW[1], NEW[4]]


@pytest.mark.parametrize("block_rows", [1, 2, 4096])
def test_head_is_compared_a_block_at_a_time(tmp_path, monkeypatch, block_rows):
    """Blocks of 1 and 2 rows (the new rows span several) find the same rows as one block."""
    import geodiag.analysis.integrity

    monkeypatch.setattr(geodiag.analysis.integrity, "_BLOCK_ROWS", block_rows)
    root = _save(_model(tied=True), tmp_path / "tied")
    emb = SafetensorsFile(root / "model.safetensors").read("model.embed_tokens.weight")
    head = emb.copy()
    head[[NEW[0], NEW[-1]]] += 0.01  # in the first block and in the last
    _plant_head(root, head)
    f = _findings(root)["tied_head_differs"]
    assert f["tokens"]["ids"] == [NEW[0], NEW[-1]] and f["count"] == 2


def test_gemma_head_holding_the_scaled_embedding_is_named(tmp_path):
    root = _save(_model(tied=True, kind="gemma"), tmp_path / "gemma")
    emb = SafetensorsFile(root / "model.safetensors").read("model.embed_tokens.weight")
    _plant_head(root, emb * np.sqrt(D))
    f = _findings(root)
    assert "embedding_scale" in f and f["embedding_scale"]["status"] == "note"
    assert (
        f["tied_head_differs"]["count"] == N_NEW and "sqrt(d)" in f["tied_head_differs"]["message"]
    )


def test_padding_rows_past_the_tokenizer(tmp_path):
    model = _model(tied=True)
    model.resize_token_embeddings(V0 + N_NEW, pad_to_multiple_of=32, mean_resizing=True)
    root = _save(model, tmp_path / "padded")  # 64 rows, 54 tokens: 10 padding rows
    f = _findings(root)["padding_rows"]
    assert f["count"] == 64 - V0 - N_NEW and f["status"] == "warn"
    with torch.no_grad():
        model.get_input_embeddings().weight[V0 + N_NEW :] = 0
    f = _findings(_save(model, tmp_path / "zeroed"))["padding_rows"]
    assert f["status"] == "note" and "are zero" in f["message"]


def test_untied_head_that_never_moved_while_the_input_did(tmp_path):
    model = _model(tied=False)
    init = _save(model, tmp_path / "init")
    with torch.no_grad():  # "training" moved every input row, the head stayed frozen
        emb = model.get_input_embeddings().weight
        emb += torch.randn(emb.shape, generator=torch.Generator().manual_seed(2)) * 1e-2
    sft = _save(model, tmp_path / "sft")
    f = _findings(sft, "--reference", init)["head_not_moved"]
    assert f["status"] == "warn" and f["count"] == N_NEW
    res = run("check", sft, "--reference", init, "--permutations", 0)
    assert res.exit_code == 1 and "barely moved since the reference" in res.stdout


@pytest.mark.parametrize("kind", ["trainable_tokens", "modules_to_save"])
def test_adapters_a_server_cannot_load_get_a_merge_note(tmp_path, kind):
    peft = pytest.importorskip("peft")
    base = _save(_model(tied=True), tmp_path / "base")
    model = transformers.AutoModelForCausalLM.from_pretrained(base)
    if kind == "trainable_tokens":
        cfg = peft.LoraConfig(r=4, target_modules=["q_proj"], trainable_token_indices=NEW)
    else:
        cfg = peft.LoraConfig(r=4, target_modules=["q_proj"], modules_to_save=["embed_tokens"])
    pm = peft.get_peft_model(model, cfg)
    pm.save_pretrained(tmp_path / "adapter")
    args = (
        ("--base", base) if kind == "trainable_tokens" else ("--new-tokens", f"{V0}:{V0 + N_NEW}")
    )
    f = _findings(tmp_path / "adapter", *args)["adapter_server"]
    assert f["status"] == "warn" and "merge" in f["message"] and "vLLM" in f["message"]
