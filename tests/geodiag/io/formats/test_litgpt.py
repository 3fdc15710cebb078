"""litgpt's checkpoint folder (geodiag.io.formats.litgpt): ``lit_model.pth`` as litgpt's
convert script saves it (``torch.save`` of the state dict, litgpt's names, the embedding
padded to ``padded_vocab_size``) beside ``model_config.yaml`` and the tokenizer files: the
verdict and figures of the same tensors saved as a safetensors folder with the same
tokenizer; wrapped as Fabric saves ``{"model": model}``, the same again."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from geodiag.cli import app
from geodiag.io.formats import litgpt
from geodiag.io.formats.registry import recognise
from geodiag.io.formats.safetensors import save_file
from tests.geodiag.geodiag_fixtures import (
    BASE_VOCAB,
    DIM,
    SID_NAMES,
    base_rows,
    planted_new_rows,
    tokenizer_json,
)
from tests.geodiag.io.sources.test_remote import _comparable

torch = pytest.importorskip("torch")
runner = CliRunner()
N_NEW = len(SID_NAMES)
PADDED = 384  # litgpt rounds the vocabulary up (padding_multiple): rows of no token
CHECK = ["--json", "--permutations", "20"]


def _tensors(kind: str) -> dict[str, np.ndarray]:
    """litgpt's GPT state dict, two blocks' worth, the embedding padded, the head untied."""
    base = base_rows()
    rng = np.random.default_rng(7)
    vocab = np.concatenate([base, planted_new_rows(kind, base)])
    pad = rng.normal(size=(PADDED - len(vocab), DIM)) * 0.02  # litgpt's init, never trained
    wte = np.concatenate([vocab, pad]).astype(np.float32)
    return {
        "transformer.wte.weight": wte,
        "transformer.h.0.attn.qkv.weight": np.ones((3 * DIM, DIM), np.float32),
        "transformer.ln_f.weight": np.ones(DIM, np.float32),
        "lm_head.weight": (wte[::-1] * 0.5).copy(),
    }


def _beside(folder) -> None:
    """The tokenizer files litgpt copies into the checkpoint folder."""
    tok = tokenizer_json(BASE_VOCAB, SID_NAMES)
    (folder / "tokenizer.json").write_text(json.dumps(tok))
    (folder / "tokenizer_config.json").write_text('{"add_bos_token": false}')


def write_litgpt(folder, tensors: dict[str, np.ndarray], wrapped: bool = False):
    folder.mkdir(parents=True)
    state = {k: torch.from_numpy(v) for k, v in tensors.items()}
    torch.save({"model": state} if wrapped else state, folder / litgpt.CHECKPOINT)
    vocab = BASE_VOCAB + N_NEW
    (folder / litgpt.CONFIG).write_text(
        f"name: tiny\nblock_size: 64\nvocab_size: {vocab}\npadding_multiple: 128\n"
        f"padded_vocab_size: {PADDED}\nn_layer: 1\nn_head: 2\nn_embd: {DIM}\n"
    )
    _beside(folder)
    return folder


def _safetensors(folder, tensors):
    folder.mkdir(parents=True)
    save_file(tensors, folder / "model.safetensors")
    _beside(folder)
    return folder


def _check(path, *extra):
    return runner.invoke(app, ["check", str(path), *CHECK, *extra])


@pytest.mark.parametrize("kind", ["grounded", "mean"])
@pytest.mark.parametrize("wrapped", [False, True])
def test_a_litgpt_folder_gets_the_safetensors_verdict_and_figures(tmp_path, kind, wrapped):
    tensors = _tensors(kind)
    folder = write_litgpt(tmp_path / "checkpoints" / "tiny", tensors, wrapped)
    assert recognise(folder) == (litgpt.FORMAT, folder / litgpt.CHECKPOINT)
    want = _check(_safetensors(tmp_path / "st", tensors))
    assert want.exit_code == (0 if kind == "grounded" else 1), want.output
    for path in (folder, folder / litgpt.CHECKPOINT):
        got = _check(path)
        assert got.exit_code == want.exit_code, got.output
        assert _comparable(json.loads(got.stdout)) == _comparable(json.loads(want.stdout))
    matrices = json.loads(got.stdout)["results"][0]["checks"]
    assert {c["matrix"] for c in matrices} == {"input", "output"}  # the untied head too
