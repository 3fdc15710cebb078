"""Two processes (torchrun, gloo on CPU) compute what one process computes with the
same global batch: the same losses and the same weights."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from gti.sft.config import SFTConfig
from gti.sft.run import run_sft

# float64: see EQUIV_ATOL in test_sft_train.py for why the runs are compared in float64
# and to within 1e-6 (here 4 steps: <= 1.2e-7 from AdamW's amplification of rounding).
SETTINGS = dict(
    steps=4, batch_size=4, lr=3e-3, warmup_steps=1, k_core=1, max_history=3, dtype="float64"
)
EQUIV_ATOL = 1e-6


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def losses(out) -> list[float]:
    return [json.loads(line)["loss"] for line in (out / "train_log.jsonl").read_text().splitlines()]


# The packed route (--objective sequence) runs the same loop: 5 users x 2 windows.
OBJECTIVES = {"example": {}, "sequence": {"objective": "sequence", "window": 4, "stride": 3}}


@pytest.mark.numerics
@pytest.mark.parametrize("objective", list(OBJECTIVES))
def test_two_processes_match_one(world, tmp_path, objective):
    settings = {**SETTINGS, **OBJECTIVES[objective]}
    single = run_sft(
        SFTConfig(
            init=world.init,
            out=tmp_path / "one",
            micro_batch_size=4,
            device="cpu",
            progress=False,
            **settings,
        )
    )
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in settings.items()]
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        "-m",
        "gti.cli",
        "sft",
        "--init",
        str(world.init),
        "-o",
        str(tmp_path / "two"),
        "--micro-batch-size",
        "2",
        "--device",
        "cpu",
        "--no-progress",
        *flags,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    two = tmp_path / "two"
    assert proc.stdout.strip().splitlines() == [str(two)]  # printed once, by rank 0
    assert json.loads((two / "sft_config.json").read_text())["processes"] == 2

    torch.testing.assert_close(
        torch.tensor(losses(two)), torch.tensor(losses(single)), rtol=0, atol=EQUIV_ATOL
    )
    a, b = load_file(single / "model.safetensors"), load_file(two / "model.safetensors")
    for k in a:
        assert a[k].dtype == b[k].dtype == torch.float64
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=EQUIV_ATOL)
