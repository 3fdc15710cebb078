"""Files older releases wrote, read as the pinned release's are: committed fixtures in
``release_data/``, each written by the release its folder names (``written_by.json``), with
the script that wrote them beside (``make_fixtures.sh`` makes a venv per release).

DeepSpeed (``release_data/deepspeed/<version>/``, ``write_deepspeed.py``): a 2-rank ZeRO-2
and ZeRO-3 checkpoint of a tiny model, and ``<stage>_consolidated.safetensors`` beside each, what
that release's own ``zero_to_fp32`` made of it: geodiag's rows must equal it bit for bit.
Releases before 0.19 pickle ``sparse_tensor_module_names`` as a set (``__builtin__.set``);
a set of anything but names is still refused, as is any other global.

transformers and PEFT (``release_data/hf/<transformers>_<peft>/``, ``write_hf.py``): a tiny
Llama with added tokens saved by that transformers (model, tokenizer, chat template), and
PEFT adapters over it (``modules_to_save``; ``trainable_token_indices`` from PEFT 0.15),
with ``expected.safetensors``, the rows that release's own model (and ``merge_and_unload()``)
holds: geodiag must find the same new tokens and read the same rows, exactly (no LoRA on
the embedding: copies of stored float32 values).
"""

from __future__ import annotations

import json
import pickle
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
from geodiag_fixtures import one_line_exit_2
from typer.testing import CliRunner

from geodiag.cli import app
from geodiag.io.checkpoint import open_checkpoint
from geodiag.io.formats.registry import open_store
from geodiag.io.formats.zero import ZeroStore
from geodiag.io.sources.options import ReadOptions

load_file = pytest.importorskip("safetensors.numpy").load_file

DATA = Path(__file__).resolve().parent / "release_data"
DEEPSPEED = sorted((DATA / "deepspeed").iterdir())
HF = sorted((DATA / "hf").iterdir())
STAGES = ("zero2", "zero3")
BASE_VOCAB = 32  # write_deepspeed.py: 40 rows, the last 8 new
TAG = "global_step1"


def _release(folder: Path) -> str:
    return json.loads((folder / "written_by.json").read_text())["deepspeed"]


def test_three_releases_over_two_years():
    releases = [_version(_release(f)) for f in DEEPSPEED]
    assert [f.name for f in DEEPSPEED] == [_release(f) for f in DEEPSPEED]
    assert len({r[:2] for r in releases}) >= 3 and min(releases) <= (0, 14, 5)


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("release", DEEPSPEED, ids=lambda f: f.name)
def test_deepspeed_release_reads_as_its_own_zero_to_fp32(release, stage):
    folder = release / stage
    store = open_store(folder)
    assert isinstance(store, ZeroStore)
    want = load_file(
        release / f"{stage}_consolidated.safetensors"
    )  # the safetensors package's reader
    assert sorted(store.names()) == sorted(want)
    for name, values in want.items():
        assert store.shape(name) == values.shape
        got = store.read_block(name, 0, len(values))
        np.testing.assert_array_equal(got, values.reshape(len(values), -1))
    res = CliRunner().invoke(app, ["check", str(folder), "--base-vocab-size", str(BASE_VOCAB)])
    assert res.exit_code in (0, 1), res.output
    assert res.output.splitlines()[0].endswith(("PASS", "FAIL"))


def _replace_pickle(path: Path, obj: object) -> None:
    """``path`` rewritten as a torch.save-shaped zip whose data.pkl is ``obj`` at protocol 2."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{path.stem}/data.pkl", pickle.dumps(obj, protocol=2))


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def test_an_old_releases_file_with_a_planted_payload_is_refused(tmp_path):
    folder = tmp_path / "planted"
    shutil.copytree(DEEPSPEED[0] / "zero2", folder)
    states = folder / TAG / "mp_rank_00_model_states.pt"
    marker = tmp_path / "ran"
    _replace_pickle(states, {"sparse_tensor_module_names": {_Payload(marker)}})
    check = ["check", str(folder), "--base-vocab-size", str(BASE_VOCAB)]
    line = one_line_exit_2(CliRunner().invoke(app, check))
    assert "refused" in line and "system" in line and states.name in line
    assert not marker.exists()
    # A set of something other than names: not what DeepSpeed writes either.
    _replace_pickle(states, {"sparse_tensor_module_names": {1, 2}})
    line = one_line_exit_2(CliRunner().invoke(app, check))
    assert "a set of something other than names" in line and states.name in line


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(".")[:3])


def _written(folder: Path) -> dict:
    return json.loads((folder / "written_by.json").read_text())


def test_transformers_4_and_5_and_peft_from_0_14():
    versions = [_written(f) for f in HF]
    assert [f.name for f in HF] == [f"{v['transformers']}_{v['peft']}" for v in versions]
    majors = {v["transformers"].split(".")[0] for v in versions}
    assert majors == {"4", "5"} and min(_version(v["peft"]) for v in versions) <= (0, 14, 0)


def _read(ckpt, ids: np.ndarray) -> dict[str, np.ndarray]:
    return {m.role: ckpt.read_rows(m, ids) for m in ckpt.matrices}


@pytest.mark.parametrize("release", HF, ids=lambda f: f.name)
def test_a_releases_folders_read_as_its_own_model_holds_them(release):
    written = _written(release)
    expected = load_file(release / "expected.safetensors")
    new = np.asarray(written["new_token_ids"])
    base = open_checkpoint(release / "base")
    assert base.new.ids.tolist() == new.tolist()
    assert base.new.tokens == [f"<a_{i}>" for i in range(len(new))]
    assert not base.tied and [m.role for m in base.matrices] == ["input", "output"]
    everything = np.arange(base.matrices[0].n_rows)
    for role, rows in _read(base, everything).items():
        np.testing.assert_array_equal(rows, expected[f"base.{role}"])
    adapters = sorted({k.split(".")[0] for k in expected} - {"base"})
    assert adapters == ["adapter"] + (
        ["adapter_tokens"] if _version(written["peft"]) >= (0, 15) else []
    )
    for name in adapters:
        ckpt = open_checkpoint(release / name, ReadOptions(base=release / "base"))
        assert ckpt.new.ids.tolist() == new.tolist()
        for role, rows in _read(ckpt, everything).items():
            np.testing.assert_array_equal(rows, expected[f"{name}.{role}"])
    res = CliRunner().invoke(app, ["check", str(release / "base")])
    assert res.exit_code in (0, 1), res.output
