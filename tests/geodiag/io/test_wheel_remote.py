"""The built wheel, installed outside the tree with no extra, reads checkpoints where they
live as a user's install would: DCP folders a real 2-rank FSDP2 run wrote (test_dcp.py's
``saved``: bare, in a Trainer ``checkpoint-N/``) and an ``hf://`` repo served by a real
server process at ``HF_ENDPOINT`` (range_server.py, the Hub's resolve route only), each
with the exit code and ``metrics --json`` figures of the local consolidated folder. Both
routes are standard library only, so the light install needs nothing more. With the
``s3`` extra installed from the wheel, an ``s3://`` copy from moto's server reads the same."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from test_dcp import saved  # noqa: F401  (the fixture: a real FSDP2 run's DCP folders)
from test_object_store_s3 import moto, needs_s3, s3, upload  # noqa: F401  (moto's server)
from test_remote import SERVER, _comparable
from test_wheel import PIP, _clean_env

from tests.geodiag.geodiag_fixtures import base_rows, planted_new_rows, write_checkpoint

REPO = "org/tiny-sid"


def _venv(tmp_path: Path, wheel: Path, extra: str = "") -> Path:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    res = subprocess.run(
        [str(venv / "bin" / "python"), *PIP, "install", "-q", f"{wheel}{extra}"],
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return venv / "bin" / "geodiag"


def _geodiag(exe: Path, cwd: Path, *args, env: dict | None = None):
    return subprocess.run(
        [str(exe), *map(str, args)],
        cwd=cwd,
        env={**_clean_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )


def _figures(exe: Path, cwd: Path, target, env: dict | None = None) -> dict:
    res = _geodiag(exe, cwd, "metrics", target, "--json", "--permutations", 20, env=env)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    out = _comparable(json.loads(res.stdout))
    out.pop("store", None)
    return out


def test_the_light_wheel_reads_dcp_and_hf_checkpoints_as_local_ones(wheel, saved, tmp_path):  # noqa: F811
    exe = _venv(tmp_path, wheel)
    # DCP, torch-free: the consolidated copy's figures and exit code.
    want = _figures(exe, tmp_path, saved / "consolidated")
    code = _geodiag(exe, tmp_path, "check", saved / "consolidated").returncode
    for path in (saved / "fsdp2", saved / "checkpoint-1"):
        assert _figures(exe, tmp_path, path) == want, path
        assert _geodiag(exe, tmp_path, "check", path).returncode == code, path

    # hf://: a passing and a failing checkpoint, each behind the Hub's resolve route.
    for kind, expected in (("random", 0), ("mean", 1)):
        root = write_checkpoint(tmp_path / kind, planted_new_rows(kind, base_rows()))
        log = tmp_path / f"{kind}.jsonl"
        server = subprocess.Popen(
            [sys.executable, str(SERVER), str(root), str(log), "--prefix", f"/{REPO}/resolve/main"],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            env = {"HF_ENDPOINT": f"http://127.0.0.1:{int(server.stdout.readline())}"}
            local = _geodiag(exe, tmp_path, "check", root)
            remote = _geodiag(exe, tmp_path, "check", f"hf://{REPO}", env=env)
            assert local.returncode == remote.returncode == expected, remote.stdout + remote.stderr
            assert f"hf://{REPO}" in remote.stdout
            assert _figures(exe, tmp_path, f"hf://{REPO}", env) == _figures(exe, tmp_path, root)
        finally:
            server.terminate()
            server.wait(timeout=10)
        assert log.is_file() and log.stat().st_size > 0  # it was the server that answered


@needs_s3
def test_the_s3_extra_reads_an_s3_copy_as_the_local_folder(wheel, s3, tmp_path):  # noqa: F811
    exe = _venv(tmp_path, wheel, "[s3]")
    for kind, expected in (("random", 0), ("mean", 1)):
        root = write_checkpoint(tmp_path / kind, planted_new_rows(kind, base_rows()))
        url = upload(root, f"wheel-{kind}", "run/ckpt")
        sent = s3.sent
        remote = _geodiag(exe, tmp_path, "check", url)
        assert _geodiag(exe, tmp_path, "check", root).returncode == expected
        assert remote.returncode == expected, remote.stdout + remote.stderr
        assert s3.sent > sent  # through the relay: moto's server answered
        assert _figures(exe, tmp_path, url) == _figures(exe, tmp_path, root)
