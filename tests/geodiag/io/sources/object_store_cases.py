"""The cases every object store's tests run (test_object_store_s3.py against moto's server,
test_object_store_gs.py against gcp-storage-emulator), each given the store's ``upload(folder,
bucket, prefix) -> URL`` and, where bytes are counted, its counting relay. ``secrets``: the
credentials the test's environment holds, which no output may show."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from typer.testing import CliRunner

from geodiag.cli import app
from tests.geodiag.geodiag_fixtures import DIM, base_rows, planted_new_rows, write_checkpoint
from tests.geodiag.io.sources.test_remote import _comparable, _metrics, big_checkpoint

runner = CliRunner()


@contextmanager
def relayed_server(argv: Callable[[int], list[str]], what: str) -> Iterator:
    """The server process ``argv(port)`` starts on a free port, waited for (30 s at most),
    behind a :class:`~tests.geodiag.io.sources.test_object_store_s3.CountingRelay` (what is yielded:
    point the client at its port); stopped after."""
    from tests.geodiag.io.sources.test_object_store_s3 import CountingRelay, _free_port

    port = _free_port()
    proc = subprocess.Popen(argv(port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, f"{what} did not start"
            time.sleep(0.1)
    relay = CountingRelay(port)
    try:
        yield relay
    finally:
        relay.shutdown()
        proc.terminate()
        proc.wait(timeout=10)


def reads_as_the_local_folder_at_a_fraction_of_the_bytes(tmp_path: Path, relay, upload) -> None:
    ckpt = big_checkpoint(tmp_path / "ckpt")
    url = upload(ckpt, "bucket-a", "runs/ckpt")
    local = _metrics(str(ckpt))
    relay.sent = 0
    remote = _metrics(url)
    assert remote["path"] == url
    assert _comparable(remote) == _comparable(local)
    weights = (ckpt / "model.safetensors").stat().st_size
    embedding = 20_024 * DIM * 4
    # Everything the server sent (the small files, JSON metadata and HTTP headers too,
    # hence 1.3, not test_remote's 1.2 of the weights alone): the weights' header, the new
    # rows and the embedding once; the 16 MB layer never.
    assert relay.sent < 1.3 * embedding < 0.2 * weights, (relay.sent, embedding, weights)
    print(f"weights {weights} B, embedding {embedding} B, sent {relay.sent} B")


def gives_the_local_verdict_and_exit_code(tmp_path: Path, upload, secrets=()) -> None:
    ckpt = tmp_path / "ckpt"
    write_checkpoint(ckpt, planted_new_rows("mean", base_rows()), sharded=True)
    url = upload(ckpt, "bucket-b", "ckpt")
    local = runner.invoke(app, ["check", str(ckpt), "--json"])
    remote = runner.invoke(app, ["check", url, "--json"])
    assert remote.exit_code == local.exit_code == 1, remote.output
    assert _comparable(json.loads(remote.stdout)) == _comparable(json.loads(local.stdout))
    assert not any(s in remote.output for s in secrets)


def reads_a_weights_file_url(tmp_path: Path, upload) -> None:
    ckpt = tmp_path / "ckpt"
    write_checkpoint(ckpt, planted_new_rows("grounded", base_rows()))
    url = upload(ckpt, "bucket-c", "ckpt")
    remote = _metrics(f"{url}/model.safetensors")
    assert _comparable(remote) == _comparable(_metrics(str(ckpt / "model.safetensors")))


def names_the_url_of_a_missing_object_or_bucket(
    tmp_path: Path, upload, scheme: str, secrets=()
) -> None:
    write_checkpoint(tmp_path / "ckpt", planted_new_rows("grounded", base_rows()))
    upload(tmp_path / "ckpt", "bucket-d", "ckpt")
    for url in (f"{scheme}://bucket-d/nothing-here", f"{scheme}://no-such-bucket/ckpt"):
        res = runner.invoke(app, ["check", url])
        assert res.exit_code == 2, res.output
        assert url in res.output and "no model weights" in res.output
        assert not any(s in res.output for s in secrets)
    missing = f"{scheme}://bucket-d/ckpt/missing.safetensors"
    res = runner.invoke(app, ["check", missing])
    assert res.exit_code == 2 and missing in res.output
    assert "not found" in res.output, res.output
