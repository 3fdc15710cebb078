"""torch.distributed.checkpoint folders behind a URL (geodiag.io.sources.remote through
geodiag.io.formats.dcp): the fixture test_dcp.py builds from a real 2-rank FSDP2 ``dcp.save``,
served by a real server process (range_server.py; for ``s3://``, moto's server; for
``gs://``, gcp-storage-emulator). The
verdict and ``metrics --json`` are the local DCP read's (and so the consolidated copy's,
test_dcp.py), the shards cost their chunks' archive edges and the rows read, and the
restricted unpickler refuses a planted payload as it does on disk."""

from __future__ import annotations

import json
import math
import shutil

import pytest
import test_dcp
import test_object_store_gs
import test_object_store_s3
import test_remote
from geodiag_fixtures import one_line_exit_2
from test_dcp import _Payload, plant_in_chunk, run
from test_object_store_gs import needs_gs
from test_object_store_s3 import needs_s3
from test_remote import REPO

from geodiag.io.formats.dcp import METADATA, DCPStore
from geodiag.io.formats.torch_zip import ARCHIVE_EDGE
from geodiag.io.sources import byte_ranges

# What test_dcp.py's fixture holds: a bare dcp.save, a checkpoint-N/ with config and
# tokenizer beside its pytorch_model_fsdp_0/, and that subfolder (config above it).
LAYOUTS = ("fsdp2", "checkpoint-1", "checkpoint-1/pytorch_model_fsdp_0")
MATRICES = ("model.embed_tokens.weight", "lm_head.weight")  # untied: both are read
# Their fixtures, under their own names (pytest takes a fixture's name from the module's):
# the DCP fixture built once for this module, the servers the other remote tests' own.
saved = test_dcp.saved
serve = test_remote.serve
moto = test_object_store_s3.moto
s3 = test_object_store_s3.s3
emulator = test_object_store_gs.emulator
gs = test_object_store_gs.gs


def _metrics(target, *options) -> dict:
    """``metrics --json`` less what names the files (path, digests, each matrix's file)."""
    res = run("metrics", target, "--json", "--permutations", 20, *options)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    for key in ("path", "digests"):
        out.pop(key)
    for matrix in out["matrices"]:
        matrix.pop("file")
    return out


@pytest.mark.parametrize("layout", LAYOUTS)
def test_https_dcp_gives_the_local_verdict_and_figures(saved, serve, layout):
    server = serve(saved)
    url = f"{server.url}/{layout}"
    assert _metrics(url) == _metrics(saved / layout)
    assert run("check", url).exit_code == run("check", saved / layout).exit_code
    assert run("check", url).exit_code == run("check", saved / "consolidated").exit_code


def _bound(folder) -> tuple[int, int]:
    """(the most the .distcp files may cost, their total size): per chunk of the matrices
    read, its archive's two edges (one request when near: the gap between them is read
    too) and its rows once (the new rows, and the vocabulary pass over the original ones:
    no larger than the sample, the vocabulary is read whole, as locally)."""
    store = DCPStore(folder)
    bound = 0
    for name in MATRICES:
        for c in store._entry(name).chunks:
            edges = min(c.length, 2 * ARCHIVE_EDGE + byte_ranges.COALESCE_GAP)
            bound += edges + math.prod(c.sizes) * 4  # F32
    shards = sum(p.stat().st_size for p in folder.glob("*.distcp"))
    return bound, shards


def test_the_shards_cost_their_chunks_edges_and_rows(saved, serve):
    server = serve(saved)
    assert run("check", f"{server.url}/fsdp2").exit_code != 2
    bound, shards = _bound(saved / "fsdp2")
    sent = server.bytes_sent(".distcp")
    assert sent <= bound < 0.6 * shards, (sent, bound, shards)
    # .metadata whole, once; no tensor but the two matrices' chunks asked for.
    assert server.bytes_sent(METADATA) == (saved / "fsdp2" / METADATA).stat().st_size
    ranges = [r for r in server.requests() if r["path"].endswith(".distcp") and r["range"]]
    store = DCPStore(saved / "fsdp2")
    chunks = [(c.begin, c.begin + c.length) for n in MATRICES for c in store._entry(n).chunks]
    for r in ranges:
        lo, hi = map(int, r["range"].removeprefix("bytes=").split("-"))
        assert any(b <= lo and hi < e for b, e in chunks), r
    print(f"fsdp2 over https: .distcp sent {sent} B of {shards} B (bound {bound} B)")


def test_a_large_chunk_costs_its_archive_edges_and_the_rows(tmp_path, serve):
    """A 5 MB chunk (one process's dcp.save of a 20,000 x 64 embedding): its archive's two
    edges, a request each, then one request per run of adjacent rows, nothing more."""
    import warnings

    import numpy as np
    import torch
    import torch.distributed.checkpoint as dcp

    from geodiag.io.sources.remote import parse

    weight = torch.randn(20_000, 64, generator=torch.Generator().manual_seed(0))
    with warnings.catch_warnings():  # "assuming the intent is to save in a single process"
        warnings.simplefilter("ignore", UserWarning)
        dcp.save({"model.embed_tokens.weight": weight}, checkpoint_id=str(tmp_path / "one"))
    server = serve(tmp_path)
    store = DCPStore(parse(f"{server.url}/one", ())[0])
    rows = np.array([19_990, 5, 6, 7, 6])
    got = store.read_rows("model.embed_tokens.weight", rows, float32=True)
    np.testing.assert_array_equal(got, weight.numpy()[rows])
    reads = [r for r in server.requests() if r["path"].endswith(".distcp")]
    assert [r["method"] for r in reads] == ["HEAD"] + ["GET"] * 4  # exists, edges, 2 runs
    assert server.bytes_sent(".distcp") == 2 * ARCHIVE_EDGE + 4 * 64 * 4


def test_hf_url_of_a_checkpoints_subfolder(saved, serve, monkeypatch):
    server = serve(saved, "--prefix", f"/{REPO}/resolve/main")
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    for layout in ("checkpoint-1", "checkpoint-1/pytorch_model_fsdp_0"):
        assert _metrics(f"hf://{REPO}/{layout}") == _metrics(saved / layout), layout


def test_the_trainers_layout_needs_the_new_rows_named_as_locally(saved, serve, tmp_path):
    """A sharded Trainer checkpoint-N/ has no config or tokenizer beside (accelerate's
    save_fsdp_model writes neither): --base-vocab-size names the new rows, remotely too."""
    ckpt = tmp_path / "checkpoint-2"
    shutil.copytree(saved / "checkpoint-1" / "pytorch_model_fsdp_0", ckpt / "pytorch_model_fsdp_0")
    (ckpt / "trainer_state.json").write_text("{}")
    server = serve(tmp_path)
    new_rows = ("--base-vocab-size", 101)
    for path in ("checkpoint-2", "checkpoint-2/pytorch_model_fsdp_0"):
        remote = _metrics(f"{server.url}/{path}", *new_rows)
        assert remote == _metrics(tmp_path / path, *new_rows), path
        assert remote["stack"]["evidence"] == "trainer_state.json"
    lines = [one_line_exit_2(run("check", p)) for p in (f"{server.url}/checkpoint-2", ckpt)]
    assert lines[0].split(": ", 2)[2] == lines[1].split(": ", 2)[2]


@pytest.mark.parametrize("where", [METADATA, "data.pkl"])
def test_a_planted_payload_served_is_refused_and_nothing_runs(saved, serve, tmp_path, where):
    folder = tmp_path / "planted"
    shutil.copytree(saved / "fsdp2", folder)
    marker = tmp_path / "ran"
    if where == METADATA:
        import pickle

        payload = _Payload()
        payload.marker = marker
        (folder / METADATA).write_bytes(pickle.dumps(payload))
    else:
        plant_in_chunk(folder, marker)
    server = serve(tmp_path)
    line = one_line_exit_2(run("check", f"{server.url}/planted"))
    shard = METADATA if where == METADATA else "__1_0.distcp"
    assert f"{server.url}/planted/{shard}" in line, line
    assert "refused" in line and "system" in line
    assert not marker.exists()


def test_a_missing_shard_is_exit_2_naming_the_url(saved, serve, tmp_path):
    shutil.copytree(saved / "fsdp2", tmp_path / "cut")
    (tmp_path / "cut" / "__1_0.distcp").unlink()
    server = serve(tmp_path)
    line = one_line_exit_2(run("check", f"{server.url}/cut"))
    assert f"{server.url}/cut/{METADATA}" in line
    assert "'__1_0.distcp'" in line and "missing" in line


def _upload(root, bucket: str) -> str:
    """Every file under ``root``, at its relative key."""
    import boto3

    client = boto3.client("s3")
    client.create_bucket(Bucket=bucket)
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        client.upload_file(str(f), bucket, f.relative_to(root).as_posix())
    return f"s3://{bucket}"


@needs_s3
def test_s3_missing_shard_is_exit_2_naming_the_url(saved, s3, tmp_path):
    shutil.copytree(saved / "fsdp2", tmp_path / "cut")
    (tmp_path / "cut" / "__0_0.distcp").unlink()
    url = _upload(tmp_path, "dcp-cut")
    line = one_line_exit_2(run("check", f"{url}/cut"))
    assert f"{url}/cut/{METADATA}" in line
    assert "'__0_0.distcp'" in line and "missing" in line
    assert test_object_store_s3.SECRET not in line


@needs_s3
def test_s3_dcp_gives_the_local_verdict_and_figures(saved, s3):
    url = _upload(saved, "dcp-bucket")
    for layout in LAYOUTS:
        assert _metrics(f"{url}/{layout}") == _metrics(saved / layout), layout
    bound, shards = _bound(saved / "fsdp2")
    s3.sent = 0
    assert run("check", f"{url}/fsdp2").exit_code == run("check", saved / "fsdp2").exit_code
    # Everything the server sent: the small files, .metadata and HTTP headers beside the
    # shards' bytes, so the bound is the https one's plus those files.
    small = sum((saved / "fsdp2" / n).stat().st_size for n in ("config.json", METADATA))
    small += sum(p.stat().st_size for p in (saved / "fsdp2").glob("tokenizer*"))
    assert s3.sent < 1.5 * (bound + small), (s3.sent, bound, small)
    print(f"fsdp2 over s3: sent {s3.sent} B in all, shards {shards} B")


@needs_gs
def test_gs_dcp_gives_the_local_verdict_and_figures(saved, gs):
    """The same reader over gs:// (object_store's GCS backend): each layout's figures are
    the local read's."""
    from gcsfs.core import GCSFileSystem

    fs = GCSFileSystem(skip_instance_cache=True)
    fs.mkdir("dcp-gs")
    for f in sorted(p for p in saved.rglob("*") if p.is_file()):
        fs.pipe_file(f"dcp-gs/{f.relative_to(saved).as_posix()}", f.read_bytes())
    for layout in LAYOUTS:
        assert _metrics(f"gs://dcp-gs/{layout}") == _metrics(saved / layout), layout
    assert run("check", "gs://dcp-gs/fsdp2").exit_code == run("check", saved / "fsdp2").exit_code
