"""torchtune's ``epoch_N/`` (geodiag.io.formats.torchtune): the state dict in
``model-0000I-of-0000K.bin`` shards as its FullModelHFCheckpointer saves them
(``torch.save`` per shard, HF names; ``pytorch_model.bin.index.json`` from 0.5 on, none
before) beside the base's copied config, tokenizer and sidecar: the verdict and figures of
the same tensors in the safetensors folder they came from; a missing shard is named."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from geodiag.cli import app
from geodiag.io.formats import torchtune
from geodiag.io.formats.registry import recognise
from geodiag.io.formats.safetensors import SafetensorsFile
from tests.geodiag.geodiag_fixtures import (
    base_rows,
    one_line_exit_2,
    planted_new_rows,
    write_checkpoint,
)
from tests.geodiag.io.sources.test_remote import _comparable

torch = pytest.importorskip("torch")
runner = CliRunner()
CHECK = ["--json", "--permutations", "20"]
COPIED = ("config.json", "tokenizer.json", "semantic_ids.json")  # copy_files keeps these


def write_torchtune(epoch, hf_folder, n_shards: int, index: bool = True):
    """``epoch_N/`` from the F32 tensors of ``hf_folder``'s model.safetensors: one tensor group
    per shard, named ``model-{i:05d}-of-{n:05d}.bin``, the index naming them."""
    f = SafetensorsFile(hf_folder / "model.safetensors")
    names = sorted(f.keys())
    epoch.mkdir(parents=True)
    weight_map = {}
    for i in range(n_shards):
        shard = f"model-{i + 1:05d}-of-{n_shards:05d}.bin"
        part = names[i::n_shards]
        torch.save({k: torch.from_numpy(f.read(k).astype("<f4")) for k in part}, epoch / shard)
        weight_map.update(dict.fromkeys(part, shard))
    if index:
        meta = {"metadata": {"total_size": 0}, "weight_map": weight_map}
        (epoch / "pytorch_model.bin.index.json").write_text(json.dumps(meta, indent=2))
    for name in COPIED:
        shutil.copy(hf_folder / name, epoch / name)
    return epoch


def _hf(tmp_path, kind):
    base, head_base = base_rows(), base_rows(seed=9) * 0.5
    head = np.concatenate([head_base, planted_new_rows(kind, head_base, seed=4)])
    new = planted_new_rows(kind, base)
    return write_checkpoint(tmp_path / "hf", new, untied_head=head, with_codebooks=False)


def _check(path):
    return runner.invoke(app, ["check", str(path), *CHECK])


@pytest.mark.parametrize("kind", ["grounded", "mean"])
@pytest.mark.parametrize(("n_shards", "index"), [(1, False), (2, True), (3, False)])
def test_epoch_folder_gets_the_safetensors_verdict_and_figures(tmp_path, kind, n_shards, index):
    hf = _hf(tmp_path, kind)
    epoch = write_torchtune(tmp_path / "out" / "epoch_0", hf, n_shards, index)
    assert recognise(epoch) == (torchtune.FORMAT, epoch)
    want, got = _check(hf), _check(epoch)
    assert want.exit_code == (0 if kind == "grounded" else 1), want.output
    assert got.exit_code == want.exit_code, got.output
    assert _comparable(json.loads(got.stdout)) == _comparable(json.loads(want.stdout))


def test_a_missing_shard_is_named(tmp_path):
    epoch = write_torchtune(tmp_path / "epoch_1", _hf(tmp_path, "grounded"), 3, index=True)
    (epoch / "model-00002-of-00003.bin").unlink()
    line = one_line_exit_2(runner.invoke(app, ["check", str(epoch)]))
    assert "torchtune's shard model-00002-of-00003.bin is missing (2 of 3)" in line
