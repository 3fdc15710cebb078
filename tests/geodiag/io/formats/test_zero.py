"""DeepSpeed ZeRO checkpoints read in place (geodiag.io.formats.zero), on checkpoints a real
2-rank DeepSpeed run writes on CPU (zero_deepspeed_run.py: ZeRO-3 and ZeRO-2, bf16 with
fp32 master weights, the output head frozen; ZeRO-3 with the head tied), and on the universal folder DeepSpeed's
``ds_to_universal.py`` makes of the ZeRO-3 one, against the consolidated copy DeepSpeed's
own ``get_fp32_state_dict_from_zero_checkpoint`` (what ``zero_to_fp32.py`` runs) makes,
saved as safetensors with the same config and tokenizer beside: the verdict and the
figures must be the same, bit for bit (both hold the same fp32 and bf16 values; nothing
is computed in between).

deepspeed is not in the ``test`` extra (about 21 MB installed, with pydantic, ninja,
hjson, msgpack, einops and py-cpuinfo; on CPU it also compiles its small shared-memory
communication op with the system C++ compiler when the group starts): without it these
tests skip.
"""

from __future__ import annotations

import os
import pickle
import shutil
import socket
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import zero_deepspeed_run as fixture
from dcp_fsdp2_run import N_SIDS, N_WORDS, model
from geodiag_fixtures import one_line_exit_2
from test_dcp import SIDS, _metrics, _Payload, run

from geodiag.io.formats import zero
from geodiag.io.formats.registry import open_store
from geodiag.io.formats.zero import ZeroStore

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
os.environ.setdefault("DS_ACCELERATOR", "cpu")  # before deepspeed is imported
pytest.importorskip("deepspeed", reason="deepspeed is not installed (not in the test extra)")
import torch.distributed as dist  # noqa: E402

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch built without distributed")
EMB, HEAD = "model.embed_tokens.weight", "lm_head.weight"
TAG = "global_step1"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """zero3/, zero2/ and zero3_tied/ (DeepSpeed's saves, config and tokenizer beside),
    zero3/universal/, and consolidated_<each>/."""
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    from safetensors.torch import save_file
    from tiny_models import word_tokenizer

    root = tmp_path_factory.mktemp("zero")
    tok = word_tokenizer(N_WORDS)
    tok.add_tokens(SIDS)
    assert len(tok) == N_WORDS + 1 + N_SIDS
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.multiprocessing.spawn(
        fixture.worker, args=(2, str(root), port, len(tok)), nprocs=2, join=True
    )
    subprocess.run(
        [sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal", "--input_folder"]
        + [str(root / "zero3" / TAG), "--output_folder", str(root / "zero3" / "universal")]
        + ["--num_extract_workers", "1", "--num_merge_workers", "1"],
        check=True,
        capture_output=True,
        env={**os.environ, "DS_ACCELERATOR": "cpu"},
    )
    for name, (_, tied) in fixture.RUNS.items():
        state = get_fp32_state_dict_from_zero_checkpoint(str(root / name))
        consolidated = root / f"consolidated_{name}"
        consolidated.mkdir()
        tensors = {k: v.detach().contiguous() for k, v in state.items()}
        if tied:  # one tensor under two names: saved once, as save_pretrained saves it
            assert tensors.pop(HEAD).data_ptr() == tensors[EMB].data_ptr()
        save_file(tensors, consolidated / "model.safetensors")
        config = model(len(tok), tied=tied).config
        for folder in (root / name, consolidated):
            config.save_pretrained(folder)
            tok.save_pretrained(folder)
    return root


def test_verdict_and_figures_equal_the_consolidated_copy(saved):
    """The checkpoint folder (``latest`` names the tag), the tag folder itself, and the
    universal folder, untied and tied: the consolidated safetensors' JSON and verdict."""
    for name in fixture.RUNS:
        folder, full = saved / name, saved / f"consolidated_{name}"
        want = _metrics(full)
        paths = [folder, folder / TAG] + ([folder / "universal"] if name == "zero3" else [])
        for path in paths:
            assert _metrics(path) == want, path
            assert run("check", path).exit_code == run("check", full).exit_code != 2


def test_the_fp32_master_rows_not_the_bf16_module_weights(saved):
    """ZeRO-2's model states also hold the bf16 weights the model trained in; the rows
    read are the fp32 master's (what zero_to_fp32 writes), and the frozen head, which has
    no master, is the bf16 tensor the model states keep."""
    store, full = ZeroStore(saved / "zero2" / TAG), open_store(saved / "consolidated_zero2")
    module = torch.load(saved / "zero2" / TAG / "mp_rank_00_model_states.pt", weights_only=False)
    bf16 = module["module"][EMB].float().numpy()
    master = store.read_block(EMB, 0, store.shape(EMB)[0], float32=True)
    assert store.dtype(EMB) == "F32" and store.dtype(HEAD) == full.dtype(HEAD) == "BF16"
    np.testing.assert_array_equal(master, full.read_block(EMB, 0, 10**6, True))
    assert not np.array_equal(master, bf16)
    np.testing.assert_array_equal(store.read_block(HEAD, 0, 10**6), full.read_block(HEAD, 0, 10**6))


def test_rows_come_from_the_ranks_that_hold_them(saved, monkeypatch):
    """ZeRO-3 splits the 122 x 16 embedding into 976 values per rank: rows 0..60 on rank 0,
    61..121 on rank 1. Rows asked from rank 1 alone read values from its file alone; any
    order, repeats, across the boundary: as stored."""
    reads = []
    read = zero.LocalFile.read

    def counted(self, spans):
        reads.append(self.path.name)
        return read(self, spans)

    monkeypatch.setattr(zero.LocalFile, "read", counted)
    full = open_store(saved / "consolidated_zero3")
    store = ZeroStore(saved / "zero3" / TAG)
    rows = np.array([121, 61, 100, 100, 62])
    want = full.read_rows(EMB, rows)
    reads.clear()
    np.testing.assert_array_equal(store.read_rows(EMB, rows), want)
    assert reads == ["bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt"]
    both = np.array([60, 3, 61, 0, 121])
    np.testing.assert_array_equal(store.read_rows(EMB, both), full.read_rows(EMB, both))
    np.testing.assert_array_equal(
        store.read_block(EMB, 55, 70, float32=True), full.read_block(EMB, 55, 70, True)
    )
    for name in (HEAD, EMB):  # the frozen head: each rank's fragment in its model states
        np.testing.assert_array_equal(store.read_block(name, 0, 122), full.read_block(name, 0, 122))


def _plant(path, tmp_path):
    """``path`` replaced by a torch.save-shaped zip whose data.pkl runs a command."""
    payload = _Payload()
    payload.marker = tmp_path / "ran"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{path.stem}/data.pkl", pickle.dumps(payload, protocol=2))
    return payload.marker


@pytest.mark.parametrize(
    "name",
    ["zero_pp_rank_0_mp_rank_00_model_states.pt", "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt"],
)
def test_a_planted_payload_is_refused_and_nothing_runs(saved, tmp_path, name):
    folder = tmp_path / "planted"
    shutil.copytree(saved / "zero3", folder)
    marker = _plant(folder / TAG / name, tmp_path)
    line = one_line_exit_2(run("check", folder))
    assert name in line and "refused" in line and "system" in line
    assert not marker.exists()


def test_a_cut_or_missing_rank_file_is_one_clear_error(saved, tmp_path):
    folder = tmp_path / "cut"
    shutil.copytree(saved / "zero3", folder)
    name = "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt"
    shard = folder / TAG / name
    shard.write_bytes(shard.read_bytes()[:-100])
    line = one_line_exit_2(run("check", folder))
    assert name in line
    shard.unlink()
    line = one_line_exit_2(run("check", folder))
    assert name in line and "missing" in line


def test_what_is_not_read_names_zero_to_fp32(saved, tmp_path):
    """Tensor-parallel partitions (mp_rank_01); two tags with no ``latest``, or a
    ``latest`` naming a tag that is not there."""
    folder = tmp_path / "tp"
    shutil.copytree(saved / "zero2", folder)
    (folder / TAG / "mp_rank_00_model_states.pt").rename(
        folder / TAG / "mp_rank_01_model_states.pt"
    )
    for p in (folder / TAG).glob("*optim_states.pt"):
        p.rename(p.with_name(p.name.replace("mp_rank_00", "mp_rank_01")))
    line = one_line_exit_2(run("check", folder))
    assert "mp_rank_01" in line and "not read" in line and "zero_to_fp32.py" in line
    assert str(folder / "zero_to_fp32.py") in line
    two = tmp_path / "two"
    shutil.copytree(saved / "zero2", two)
    shutil.copytree(two / TAG, two / "global_step2")
    (two / "latest").unlink()
    line = one_line_exit_2(run("check", two))
    assert "global_step1, global_step2" in line and "latest" in line
    (two / "latest").write_text("global_step9")  # a tag that is not there
    line = one_line_exit_2(run("check", two))
    assert "latest" in line and "global_step9" in line


def test_names_are_zero_to_fp32s(saved):
    for name in ("zero3", "zero2"):
        store = open_store(saved / name)
        full = open_store(saved / f"consolidated_{name}")
        assert isinstance(store, ZeroStore)
        assert sorted(store.names()) == sorted(full.names())
    tied = open_store(saved / "zero3_tied")
    assert tied.read_block(HEAD, 0, 122).tobytes() == tied.read_block(EMB, 0, 122).tobytes()
