"""``s3://`` checkpoints (geodiag.io.sources.object_store) against a real S3 server process: moto's
server mode, started by the test, behind a relay that counts the bytes it sends. The
verdict and the metrics are the local folder's, the weights cost their header and the rows
read, and every failure is exit 2 naming the URL, with no credential shown.

Both are in the ``test`` extra (``make test`` runs these); without s3fs or moto's server
the tests skip, saying what to install."""

from __future__ import annotations

import importlib.util
import re
import socket
import socketserver
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from geodiag.cli import app
from geodiag.io.sources import byte_ranges, object_store
from tests.geodiag.io.sources import object_store_cases as cases

runner = CliRunner()
KEY_ID, SECRET = "AKIATESTKEYID0000042", "test-secret-access-key-never-shown"
needs_s3 = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("s3fs", "moto", "flask", "flask_cors")),
    reason="s3:// tests need s3fs and moto's server: pip install -e '.[test]' (or 'geodiag[s3]' "
    "'moto[s3]' flask flask-cors)",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CountingRelay(socketserver.ThreadingTCPServer):
    """Relays each connection to ``target`` and counts the bytes sent back; the first
    ``fail_first`` connections are answered 503 instead (and closed)."""

    daemon_threads = allow_reuse_address = True

    def __init__(self, target: int) -> None:
        self.target, self.sent, self.lock = target, 0, threading.Lock()
        self.fail_first = 0
        super().__init__(("127.0.0.1", 0), _Relay)
        threading.Thread(target=self.serve_forever, daemon=True).start()


class _Relay(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        with self.server.lock:
            fail = self.server.fail_first > 0
            self.server.fail_first -= fail
        if fail:
            self.request.recv(65536)
            self.request.sendall(
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                b"Connection: close\r\n\r\n"
            )
            return
        upstream = socket.create_connection(("127.0.0.1", self.server.target))

        def pump(src: socket.socket, dst: socket.socket, count: bool) -> None:
            while data := src.recv(65536):
                if count:
                    with self.server.lock:
                        self.server.sent += len(data)
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)

        back = threading.Thread(target=pump, args=(upstream, self.request, True), daemon=True)
        back.start()
        try:
            pump(self.request, upstream, False)
        except OSError:
            pass
        back.join(timeout=30)
        upstream.close()


@pytest.fixture(scope="module")
def moto():
    def argv(port: int) -> list[str]:
        return [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]

    with cases.relayed_server(argv, "moto server") as relay:
        yield relay


@pytest.fixture
def s3(moto, monkeypatch, tmp_path):
    """The environment pointed at the relay, with dummy credentials and no AWS files."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{moto.server_address[1]}",
        "AWS_CONFIG_FILE": str(tmp_path / "no-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    return moto


def upload(folder: Path, bucket: str, prefix: str) -> str:
    import boto3

    client = boto3.client("s3")
    client.create_bucket(Bucket=bucket)
    for f in sorted(folder.iterdir()):
        client.upload_file(str(f), bucket, f"{prefix}/{f.name}")
    return f"s3://{bucket}/{prefix}"


@needs_s3
def test_s3_folder_reads_as_the_local_folder_at_a_fraction_of_the_bytes(tmp_path, s3):
    cases.reads_as_the_local_folder_at_a_fraction_of_the_bytes(tmp_path, s3, upload)


@needs_s3
def test_check_gives_the_local_verdict_and_exit_code(tmp_path, s3):
    cases.gives_the_local_verdict_and_exit_code(tmp_path, upload, (KEY_ID, SECRET))


@needs_s3
def test_a_weights_file_url(tmp_path, s3):
    cases.reads_a_weights_file_url(tmp_path, upload)


@needs_s3
def test_missing_key_and_bucket_are_exit_2_naming_the_url(tmp_path, s3):
    cases.names_the_url_of_a_missing_object_or_bucket(tmp_path, upload, "s3", (KEY_ID, SECRET))


@needs_s3
def test_no_credentials_is_exit_2(tmp_path, s3, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    res = runner.invoke(app, ["check", "s3://bucket-e/ckpt"])
    assert res.exit_code == 2 and "s3://bucket-e/ckpt" in res.output, res.output
    assert "no AWS credentials" in res.output


@needs_s3
def test_an_unreachable_endpoint_fails_fast(s3, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_free_port()}")
    start = time.monotonic()
    res = runner.invoke(app, ["check", "s3://bucket-f/ckpt"])
    assert res.exit_code == 2 and "cannot connect" in res.output, res.output
    assert "s3://bucket-f/ckpt" in res.output and SECRET not in res.output
    assert time.monotonic() - start < 5


@needs_s3
def test_server_errors_are_retried_and_refusals_are_not(monkeypatch):
    """A 5xx is tried again; without s3:ListBucket a missing key answers 403, so a small
    file refused is absent, the weights refused an error."""
    from botocore.exceptions import ClientError

    monkeypatch.setattr(byte_ranges, "BACKOFF_S", 0.01)

    def error(code: str, status: int) -> ClientError:
        meta = {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {}}
        meta["ResponseMetadata"]["HTTPStatusCode"] = status
        return ClientError(meta, "HeadObject")

    class FlakyFs:
        calls = 0

        def call_s3(self, method: str, **kwargs: str) -> dict:
            self.calls += 1
            if kwargs["Key"].endswith("config.json"):
                raise PermissionError("Access Denied") from error("AccessDenied", 403)
            if self.calls < 3:
                raise OSError("We encountered an internal error") from error("InternalError", 500)
            return {"ContentLength": 7}

    folder = object_store.ObjectFolder("s3://b/p", FlakyFs(), object_store.BACKENDS["s3://"])
    assert folder.file("model.safetensors").size() == 7 and folder.fs.calls == 3
    assert not folder.exists("config.json")
    with pytest.raises(object_store.InputError, match=r"s3://b/p/config.json: refused"):
        folder.exists("config.json", required=True)


@pytest.mark.parametrize("scheme", object_store.SCHEMES)
def test_without_the_filesystem_the_install_line_is_named(monkeypatch, scheme):
    backend = object_store.BACKENDS[scheme]
    monkeypatch.setitem(
        object_store.BACKENDS, scheme, replace(backend, modules=("fs_not_installed",))
    )
    res = runner.invoke(app, ["check", f"{scheme}bucket/ckpt"])
    assert res.exit_code == 2, res.output
    assert f"{scheme}bucket/ckpt" in res.output and backend.install in res.output


@pytest.mark.parametrize("scheme", object_store.SCHEMES)
def test_each_store_has_its_extra_and_make_test_installs_it(scheme):
    """The Backend table names the extra and the module; pyproject's extra installs that
    module, and the `test` extra (what `make test` installs) includes it."""
    import tomllib

    backend = object_store.BACKENDS[scheme]
    root = Path(__file__).resolve().parents[4]
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    names = {re.split(r"[<>=\[ ;]", r, maxsplit=1)[0] for r in extras[backend.extra]}
    assert set(backend.modules) <= names
    assert f"geodiag[{backend.extra}]" in extras["test"]
