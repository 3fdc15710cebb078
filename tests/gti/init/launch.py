"""Two-process runs of ``gti init`` for the distributed tests: ``torchrun`` and ``accelerate
launch`` on CPU (gloo)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

STEPS, BATCH, LR = 3, 8, 0.5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def weights(ckpt: Path) -> dict[str, torch.Tensor]:
    return load_file(ckpt / "model.safetensors")


def embedding(ckpt: Path) -> torch.Tensor:
    return weights(ckpt)["model.embed_tokens.weight"]


# How each launcher starts 2 processes on this machine; the command after it is the same.
LAUNCHERS = {
    "torchrun": lambda port: [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
        "--master_addr", "127.0.0.1", "--master_port", str(port),
    ],
    # accelerate's --cpu starts one process (several need its MPI config): --multi_gpu is
    # its torchrun launcher, which on a machine without GPUs starts CPU processes.
    "accelerate": lambda port: [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes",
        "2", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_ip", "127.0.0.1", "--main_process_port", str(port),
    ],
}  # fmt: skip


def torchrun(
    world, out, *extra: str, launcher: str = "torchrun", entry: tuple[str, ...] = ("-m", "gti.cli")
) -> subprocess.CompletedProcess:
    """``gti init --strategy gti`` on 2 processes, STEPS x BATCH, one thread each, started
    by ``launcher`` (:data:`LAUNCHERS`); ``entry``: what each process runs (a script and its
    own arguments in place of ``-m gti.cli``)."""
    cmd = [
        *LAUNCHERS[launcher](free_port()),
        *entry, "init", "--sids", str(world.sids_dir), "-o", str(out),
        "--strategy", "gti", "--steps", str(STEPS), "--batch-size", str(BATCH),
        "--device", "cpu", "--no-progress", *extra,
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def one_process(world, out: Path, objective: str) -> Path:
    """The same run as :func:`torchrun`'s (SGD at LR, STEPS x BATCH) on this one process:
    the reference the two-process rows are compared with."""
    from gti.init.config import GroundingConfig, InitConfig
    from gti.init.run import run_init

    return run_init(
        InitConfig(
            sids=world.sids_dir, out=out, strategy="gti", device="cpu",
            grounding=GroundingConfig(
                steps=STEPS, batch_size=BATCH, lr=LR, optimizer="sgd", progress=False,
                objective=objective,
            ),
        )
    )  # fmt: skip


def steps_of(ckpt: Path) -> list[dict]:
    rows = [json.loads(x) for x in (ckpt / "train_log.jsonl").read_text().splitlines()]
    return [r for r in rows if "loss" in r]
