"""A drop-in grounding run SIGKILLed mid-way (a real kill of a subprocess) resumes from its
last saved state when the same command is run again, and ends with the same rows and log as
a run never interrupted."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file

from gti.checkpoint_files import partial_dir

HERE = Path(__file__).parent


def gti_init(lcrec, model, out: Path, kill_at: int = 0) -> subprocess.CompletedProcess:
    args = [
        "init",
        "--sids",
        lcrec.index,
        "--items",
        lcrec.items,
        "--codebooks",
        lcrec.codebooks,
        "--model",
        model,
        "--strategy",
        "gti",
        "--steps",
        8,
        "--batch-size",
        4,
        "--lr",
        1e-2,
        "--save-every",
        2,
        "--holdout",
        8,
        "--no-progress",
        "-o",
        out,
    ]
    cmd = [sys.executable, str(HERE / "killed_run.py"), str(kill_at), *map(str, args)]
    env = {"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "GTI_CACHE": str(out.parent / "cache")}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)


def timeless(out: Path) -> list[dict]:
    lines = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    return [{k: v for k, v in e.items() if k != "seconds"} for e in lines]


def test_sigkill_then_the_same_command_resumes_to_the_uninterrupted_result(
    lcrec, lcrec_model, tmp_path
):
    reference = tmp_path / "reference"
    assert gti_init(lcrec, lcrec_model, reference).returncode == 0

    out = tmp_path / "killed"
    killed = gti_init(lcrec, lcrec_model, out, kill_at=5)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not out.exists()  # nothing written half-way
    state = torch.load(partial_dir(out) / "state.pt", weights_only=True)
    assert state["step"] == 4  # the last save before the kill (every 2 steps)

    resumed = gti_init(lcrec, lcrec_model, out)
    assert resumed.returncode == 0, resumed.stderr
    assert not partial_dir(out).exists()
    # Same float32 operations in the same order, restored bit for bit: exact equality.
    weights = "model.embed_tokens.weight"
    ours, ref = (
        load_file(out / "model.safetensors")[weights],
        load_file(reference / "model.safetensors")[weights],
    )
    assert np.array_equal(ours, ref)
    assert timeless(out) == timeless(reference)
