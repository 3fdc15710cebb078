"""torch.distributed.checkpoint folders read in place (geodiag.io.formats.dcp), on checkpoints a
real 2-rank FSDP2 run writes (dcp_fsdp2_run.py), against the consolidated copy torch's
own ``dcp_to_torch_save`` makes of them, saved as safetensors with the same config and
tokenizer beside: the verdict and the figures must be the same."""

from __future__ import annotations

import json
import pickle
import shutil
import socket

import dcp_fsdp2_run as fixture
import numpy as np
import pytest
from geodiag_fixtures import one_line_exit_2
from typer.testing import CliRunner

from geodiag.cli import app
from geodiag.io.formats.dcp import DCPStore
from geodiag.io.formats.registry import open_store

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
import torch.distributed as dist  # noqa: E402

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch built without distributed")

SIDS = [f"<a_{i}>" for i in range(11)] + [f"<b_{i}>" for i in range(10)]


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """fsdp2/ and checkpoint-1/ (DCP, config and tokenizer beside) and consolidated/."""
    from safetensors.torch import save_file
    from tiny_models import word_tokenizer
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    root = tmp_path_factory.mktemp("dcp")
    tok = word_tokenizer(fixture.N_WORDS)
    tok.add_tokens(SIDS)
    assert len(tok) == fixture.N_WORDS + 1 + fixture.N_SIDS
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.multiprocessing.spawn(
        fixture.worker, args=(2, str(root), port, len(tok)), nprocs=2, join=True
    )
    config = fixture.model(len(tok)).config
    consolidated = root / "consolidated"
    consolidated.mkdir()
    dcp_to_torch_save(root / "fsdp2", root / "full.pt")
    state = torch.load(root / "full.pt", weights_only=True)
    save_file({k: v.contiguous() for k, v in state.items()}, consolidated / "model.safetensors")
    for folder in (root / "fsdp2", root / "checkpoint-1", consolidated):
        config.save_pretrained(folder)
        tok.save_pretrained(folder)
    return root


def _metrics(path, *options) -> dict:
    """``metrics --json`` (with ``options``) less what names the files: the path, the store,
    the digests and the file each matrix was read from."""
    res = run("metrics", path, "--json", "--permutations", 20, *options)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    for key in ("path", "store", "digests"):
        out.pop(key)
    for matrix in out["matrices"]:
        matrix.pop("file")
    return out


def test_verdict_and_figures_equal_the_consolidated_copy(saved):
    """Bare DCP, a Trainer checkpoint-N/ with pytorch_model_fsdp_0/ (optimizer state
    included), and that subfolder itself: the consolidated safetensors' JSON and verdict."""
    want = _metrics(saved / "consolidated")
    sharded = saved / "checkpoint-1" / "pytorch_model_fsdp_0"
    for path in (saved / "fsdp2", saved / "checkpoint-1", sharded):
        assert _metrics(path) == want, path
        assert run("check", path).exit_code == run("check", saved / "consolidated").exit_code


def test_names_are_the_models_and_optimizer_state_is_never_the_embedding(saved):
    full = open_store(saved / "consolidated")
    for path in (saved / "fsdp2", saved / "checkpoint-1"):
        store = open_store(path)
        assert isinstance(store, DCPStore)
        assert sorted(store.names()) == sorted(full.names())
        assert not any("exp_avg" in n or n.startswith("optim") for n in store.names())


def test_rows_come_from_the_chunks_that_hold_them(saved):
    """122 rows over 2 ranks: rank 1's shard holds rows 61..121. Rows asked from it alone
    read nothing of rank 0's file; any order, repeats, across the boundary: as stored."""
    full = open_store(saved / "consolidated")
    name = "model.embed_tokens.weight"
    store = DCPStore(saved / "fsdp2")
    rows = np.array([121, 61, 100, 100, 62])
    np.testing.assert_array_equal(store.read_rows(name, rows), full.read_rows(name, rows))
    read = {p.rsplit("/", 1)[-1] for p in store.digests()}
    assert read == {".metadata", "__1_0.distcp"}
    both = np.array([60, 3, 61, 0, 121])
    np.testing.assert_array_equal(store.read_rows(name, both), full.read_rows(name, both))
    np.testing.assert_array_equal(
        store.read_block(name, 55, 70, float32=True), full.read_block(name, 55, 70, True)
    )


class _Payload:
    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def test_a_planted_payload_is_refused_and_nothing_runs(saved, tmp_path):
    folder = tmp_path / "planted"
    shutil.copytree(saved / "fsdp2", folder)
    payload = _Payload()
    payload.marker = tmp_path / "ran"
    (folder / ".metadata").write_bytes(pickle.dumps(payload))
    line = one_line_exit_2(run("check", folder))
    assert ".metadata" in line and "refused" in line and "system" in line
    assert not payload.marker.exists()


def test_damaged_shards_are_one_clear_error(saved, tmp_path):
    folder = tmp_path / "cut"
    shutil.copytree(saved / "fsdp2", folder)
    shard = folder / "__1_0.distcp"
    shard.write_bytes(shard.read_bytes()[:100])
    line = one_line_exit_2(run("check", folder))
    assert "__1_0.distcp" in line
    (folder / "__1_0.distcp").unlink()
    line = one_line_exit_2(run("check", folder))
    assert ".metadata" in line and "__1_0.distcp" in line and "missing" in line


def plant_in_chunk(folder, marker) -> None:
    """Replace the data.pkl of the embedding's chunk in ``folder``/__1_0.distcp with a
    pickle that would touch ``marker``, the archive padded to the chunk's length (so every
    offset .metadata gives holds)."""
    import zipfile

    payload = _Payload()
    payload.marker = marker
    planted = pickle.dumps(payload, protocol=2)
    shard = folder / "__1_0.distcp"
    old = shard.read_bytes()
    with zipfile.ZipFile(shard.with_suffix(".zip"), "w") as z:
        z.writestr("archive/data.pkl", planted)
    archive = shard.with_suffix(".zip").read_bytes()
    shard.with_suffix(".zip").unlink()
    store = DCPStore(folder)
    chunk = next(
        c for c in store._entry("model.embed_tokens.weight").chunks if c.name == shard.name
    )
    assert len(archive) <= chunk.length
    new = (
        old[: chunk.begin] + archive.ljust(chunk.length, b"\0") + old[chunk.begin + chunk.length :]
    )
    shard.write_bytes(new)


def test_a_payload_in_a_chunks_data_pkl_is_refused_and_nothing_runs(saved, tmp_path):
    """The archive of a chunk carries a pickle too (data.pkl): the same restriction."""
    folder = tmp_path / "planted"
    shutil.copytree(saved / "fsdp2", folder)
    plant_in_chunk(folder, tmp_path / "ran")
    line = one_line_exit_2(run("check", folder))
    assert "__1_0.distcp" in line and "refused" in line and "system" in line
    assert not (tmp_path / "ran").exists()
