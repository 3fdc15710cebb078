"""A training run's ``torch.save`` checkpoint (nanoGPT's ``ckpt.pt``: the state dict under
``model`` beside the optimizer's state, the step, the run's config) read without torch:
the verdict and the metrics of the same rows saved as safetensors, a planted payload
refused with nothing run, and a plain state dict left to the torch reader as before."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from typer.testing import CliRunner

from geodiag.cli import app
from geodiag.io.formats import torch_pickle, torch_training
from geodiag.io.formats.registry import open_store, recognise
from geodiag.io.formats.safetensors import save_file
from tests.geodiag.geodiag_fixtures import BASE_VOCAB, base_rows, planted_new_rows
from tests.geodiag.io.sources.test_remote import _comparable

torch = pytest.importorskip("torch")
runner = CliRunner()
N_NEW = 24
CHECK = ["--json", "--permutations", "20", "--new-tokens", f"{BASE_VOCAB}:{BASE_VOCAB + N_NEW}"]


def _nanogpt(folder, emb: np.ndarray, dtype=None):
    """``folder/ckpt.pt`` as nanoGPT's train.py saves it, with a tied head and one AdamW
    step's state (the step moves the rows: the saved table is returned too)."""
    wte = torch.nn.Embedding(*emb.shape)
    with torch.no_grad():
        wte.weight.copy_(torch.from_numpy(emb))
    if dtype is not None:
        wte = wte.to(dtype)
    model = torch.nn.ModuleDict({"wte": wte, "ln_f": torch.nn.LayerNorm(emb.shape[1])})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model["ln_f"](model["wte"](torch.tensor([1, 2]))).float().sum().backward()
    opt.step()
    opt.zero_grad()
    state = {f"transformer.{k}": v for k, v in model.state_dict().items()}
    state["lm_head.weight"] = state["transformer.wte.weight"]  # tied, one storage
    folder.mkdir()
    torch.save(
        {
            "model": state,
            "optimizer": opt.state_dict(),
            "model_args": {"n_embd": emb.shape[1], "vocab_size": emb.shape[0], "bias": False},
            "iter_num": 5,
            "best_val_loss": torch.tensor(1.25),
            "config": {"learning_rate": 1e-3, "dataset": "shakespeare_char"},
        },
        folder / "ckpt.pt",
    )
    return folder, state["transformer.wte.weight"].float().numpy()


def _reference(folder, emb: np.ndarray):
    folder.mkdir()
    table = emb.astype(np.float32)
    save_file(
        {"transformer.wte.weight": table, "lm_head.weight": table}, folder / "model.safetensors"
    )
    return folder


@pytest.mark.parametrize("kind", ["grounded", "mean"])
def test_a_nanogpt_checkpoint_gets_the_verdict_of_the_same_rows(tmp_path, kind):
    base = base_rows()
    emb = np.concatenate([base, planted_new_rows(kind, base)]).astype(np.float32)
    run, saved = _nanogpt(tmp_path / "out", emb)
    assert recognise(run) == (torch_training.FORMAT, run / "ckpt.pt")
    assert recognise(run / "ckpt.pt")[0] is torch_training.FORMAT  # a file, by its bytes
    ref = _reference(tmp_path / "ref", saved)
    got = runner.invoke(app, ["check", str(run), *CHECK])
    want = runner.invoke(app, ["check", str(ref), *CHECK])
    assert got.exit_code == want.exit_code == (0 if kind == "grounded" else 1), got.output
    assert _comparable(json.loads(got.stdout)) == _comparable(json.loads(want.stdout))


def test_rows_and_blocks_as_stored_bf16_too(tmp_path):
    emb = base_rows()[:40].astype(np.float32)
    run, expected = _nanogpt(tmp_path / "out", emb, dtype=torch.bfloat16)
    store = open_store(run)
    assert store.description == "training checkpoint ckpt.pt (its 'model' state dict)"
    assert store.dtype("transformer.wte.weight") == "BF16"
    rows = np.array([39, 0, 7, 7])
    np.testing.assert_array_equal(store.read_rows("transformer.wte.weight", rows), expected[rows])
    np.testing.assert_array_equal(store.read_block("lm_head.weight", 3, 9), expected[3:9])


def test_a_planted_payload_is_not_run_and_a_plain_state_dict_stays_torchs(tmp_path):
    class Payload:
        def __reduce__(self):
            return (print, ("ran",))

    (tmp_path / "evil").mkdir()
    torch.save({"model": {"w": torch.zeros(2, 2)}, "x": Payload()}, tmp_path / "evil" / "ckpt.pt")
    assert recognise(tmp_path / "evil") is None  # refused by the restricted unpickler
    plain = tmp_path / "plain.pt"
    torch.save({"transformer.wte.weight": torch.zeros(3, 4)}, plain)
    assert recognise(plain)[0] is torch_pickle.FORMAT
    with pytest.raises(pickle.UnpicklingError):  # the payload is real: torch's own check
        torch.load(tmp_path / "evil" / "ckpt.pt", weights_only=True)


def test_by_url_the_checkpoint_is_named_with_the_way_out():
    res = runner.invoke(app, ["check", "https://example.invalid/run/out/ckpt.pt"])
    assert res.exit_code == 2
    assert torch_training.FORMAT.remote in " ".join(res.output.split())
