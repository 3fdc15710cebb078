"""``gs://`` checkpoints (geodiag.io.sources.object_store) against a real GCS server process:
gcp-storage-emulator (the JSON API, ranged media GETs), started by the test, behind the
relay of test_object_store_s3 that counts the bytes it sends and can answer 503. The verdict and
the metrics are the local folder's, the weights cost their header and the rows read, and
every failure is exit 2 naming the URL, with no credential shown.

Both are in the ``test`` extra (``make test`` runs these); without gcsfs or the emulator
the tests skip, saying what to install."""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from geodiag.cli import app
from geodiag.io.sources import byte_ranges
from tests.geodiag.geodiag_fixtures import base_rows, planted_new_rows, write_checkpoint
from tests.geodiag.io.sources import object_store_cases as cases
from tests.geodiag.io.sources.test_object_store_s3 import _free_port
from tests.geodiag.io.sources.test_remote import Server, _metrics

runner = CliRunner()
ACCESS_TOKEN = "ya29.access-token-never-shown"
needs_gs = pytest.mark.skipif(
    importlib.util.find_spec("gcsfs") is None
    or importlib.util.find_spec("gcp_storage_emulator") is None,
    reason="gs:// tests need gcsfs and gcp-storage-emulator: pip install -e '.[test]' (or "
    "'geodiag[gs]' gcp-storage-emulator)",
)


@pytest.fixture(scope="module")
def emulator():
    def argv(port: int) -> list[str]:
        return [sys.executable, "-m", "gcp_storage_emulator", "start"] + [
            "-H", "127.0.0.1", "--port", str(port), "--in-memory", "-q"
        ]  # fmt: skip

    with cases.relayed_server(argv, "gcp-storage-emulator") as relay:
        yield relay


@pytest.fixture
def gs(emulator, monkeypatch, tmp_path):
    """The environment pointed at the relay, with no Google credentials anywhere (gcsfs then
    reads anonymously, which the emulator allows as a public bucket does)."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{emulator.server_address[1]}")
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "no-gcloud"))
    monkeypatch.setenv("NO_GCE_CHECK", "true")  # gcsfs: do not probe the metadata server
    monkeypatch.setenv("GCE_METADATA_HOST", f"127.0.0.1:{_free_port()}")  # google-auth's probe
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setattr(byte_ranges, "BACKOFF_S", 0.01)
    emulator.fail_first = 0
    return emulator


def upload(folder: Path, bucket: str, prefix: str) -> str:
    from gcsfs.core import GCSFileSystem

    fs = GCSFileSystem(skip_instance_cache=True)
    if not fs.exists(bucket):
        fs.mkdir(bucket)
    for f in sorted(folder.iterdir()):
        fs.pipe_file(f"{bucket}/{prefix}/{f.name}", f.read_bytes())
    return f"gs://{bucket}/{prefix}"


@needs_gs
def test_gs_folder_reads_as_the_local_folder_at_a_fraction_of_the_bytes(tmp_path, gs):
    cases.reads_as_the_local_folder_at_a_fraction_of_the_bytes(tmp_path, gs, upload)


@needs_gs
def test_check_gives_the_local_verdict_and_exit_code(tmp_path, gs):
    cases.gives_the_local_verdict_and_exit_code(tmp_path, upload)


@needs_gs
def test_a_weights_file_url(tmp_path, gs):
    cases.reads_a_weights_file_url(tmp_path, upload)


@needs_gs
def test_missing_object_and_bucket_are_exit_2_naming_the_url(tmp_path, gs):
    cases.names_the_url_of_a_missing_object_or_bucket(tmp_path, upload, "gs")


@needs_gs
def test_an_unreachable_endpoint_fails_fast(gs, monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{_free_port()}")
    start = time.monotonic()
    res = runner.invoke(app, ["check", "gs://bucket-f/ckpt"])
    assert res.exit_code == 2 and "cannot connect" in res.output, res.output
    assert "gs://bucket-f/ckpt" in res.output
    assert time.monotonic() - start < 5


@needs_gs
def test_a_server_that_never_answers_times_out(gs, monkeypatch):
    """Offline behind a proxy, or a hung endpoint: each try ends at the read timeout, and
    after the last one the command exits 2 naming the URL."""
    silent = socket.create_server(("127.0.0.1", 0))  # accepts (the kernel does), never answers
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{silent.getsockname()[1]}")
    monkeypatch.setattr(byte_ranges, "CONNECT_TIMEOUT_S", 0.2)  # reads time out at 3x this
    start = time.monotonic()
    res = runner.invoke(app, ["check", "gs://bucket-t/ckpt"])
    silent.close()
    assert res.exit_code == 2, res.output
    assert (
        f"gs://bucket-t/ckpt/config.json: gave up after {byte_ranges.RETRIES} tries" in res.output
    )
    assert "Timeout" in res.output
    assert time.monotonic() - start < byte_ranges.RETRIES * 0.6 + 5


@needs_gs
def test_server_errors_are_retried_then_given_up(tmp_path, gs):
    write_checkpoint(tmp_path / "ckpt", planted_new_rows("grounded", base_rows()))
    url = upload(tmp_path / "ckpt", "bucket-g", "ckpt")
    gs.fail_first = byte_ranges.RETRIES - 1  # the last try of the first request succeeds
    assert _metrics(url)["path"] == url and gs.fail_first == 0
    gs.fail_first = byte_ranges.RETRIES
    res = runner.invoke(app, ["check", url])
    assert res.exit_code == 2, res.output
    assert f"{url}/config.json: gave up after {byte_ranges.RETRIES} tries: HTTP 503" in res.output


@needs_gs
def test_anonymous_refused_names_the_credentials_to_set(tmp_path, gs, serve_401):
    """No credentials: gcsfs asks anonymously, as it does; a private bucket answers 401."""
    res = runner.invoke(app, ["check", "gs://private/ckpt"])
    assert res.exit_code == 2 and "gs://private/ckpt/model.safetensors" in res.output, res.output
    assert "refused (HTTP 401)" in res.output and "GOOGLE_APPLICATION_CREDENTIALS" in res.output


@needs_gs
def test_credentials_from_the_metadata_server_are_sent_and_never_shown(
    tmp_path, gs, serve_401, monkeypatch
):
    """On Google Cloud the chain ends at the metadata server (here a fake one, through
    google-auth's GCE_METADATA_HOST, which it reads once at import: hence a fresh process
    per check): its access token is sent as a Bearer token, and is not shown when the
    server still refuses."""
    metadata = _metadata_server()
    monkeypatch.delenv("NO_GCE_CHECK")
    monkeypatch.setenv("GCE_METADATA_HOST", f"127.0.0.1:{metadata.server_address[1]}")
    monkeypatch.setenv("GCE_METADATA_IP", f"127.0.0.1:{metadata.server_address[1]}")
    res = _check_in_a_process("gs://private/ckpt")
    assert res.exit_code == 2, res.output
    assert "refused (HTTP 401): the Google credentials found may not read it" in res.output
    assert ACCESS_TOKEN not in res.output
    # The same token accepted: past the 401, to an honest 404 for the missing objects.
    accepting = Server(tmp_path, tmp_path / "log-accepting.jsonl", "--token", ACCESS_TOKEN)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", accepting.url)
    res = _check_in_a_process("gs://private/ckpt")
    accepting.stop()
    metadata.shutdown()
    assert res.exit_code == 2 and "no model weights found" in res.output, res.output
    assert {r["status"] for r in accepting.requests()} == {404}


@pytest.fixture
def serve_401(tmp_path, monkeypatch):
    """range_server.py as the GCS endpoint, answering 401 to every request without its
    token (as GCS does to a private bucket)."""
    server = Server(tmp_path, tmp_path / "log.jsonl", "--token", "only-this-token")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", server.url)
    yield server
    server.stop()


@dataclass
class _Result:
    exit_code: int
    output: str


def _check_in_a_process(url: str) -> _Result:
    code = "import sys; from geodiag.cli import main; sys.argv[1:] = ['check', sys.argv[1]]; main()"
    proc = subprocess.run(
        [sys.executable, "-c", code, url], capture_output=True, text=True, timeout=60
    )
    return _Result(proc.returncode, proc.stdout + proc.stderr)


def _metadata_server() -> ThreadingHTTPServer:
    """A GCE metadata server that grants ACCESS_TOKEN to the default service account."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            kind = "application/json"
            if self.path.split("?")[0].endswith("/token"):
                body = json.dumps({"access_token": ACCESS_TOKEN, "expires_in": 3600}).encode()
            elif "service-accounts/default" in self.path:
                body = json.dumps({"email": "sa@test", "scopes": ["s"], "aliases": []}).encode()
            else:
                body, kind = b"test-project", "text/plain"
            self.send_response(200)
            self.send_header("Metadata-Flavor", "Google")
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
