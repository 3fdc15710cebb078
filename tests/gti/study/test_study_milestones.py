"""Stopping SFT at the study's milestones changes nothing: the milestone checkpoints
come from the resume state, and the final weights equal one straight run's; a kill
between the stop and the checkpoint's write is redone without training a step more."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from gti.experiment.runner import Stages
from gti.sft.config import SFTConfig
from gti.sft.run import run_sft
from gti.study.run import sft_until

sys.path.insert(0, str(Path(__file__).parents[1] / "sft"))
from sftworld import build_world  # noqa: E402

# As tests/gti/sft/test_sft_train.py (EQUIV_ATOL, derived there): float64 runs that
# differ only in summation order stay within 1e-6 on every weight over these steps.
EQUIV_ATOL = 1e-6


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return build_world(tmp_path_factory.mktemp("milestone-world"))


def config(world, out) -> SFTConfig:
    return SFTConfig(
        init=world.init,
        out=out,
        steps=6,
        batch_size=4,
        micro_batch_size=2,
        lr=3e-3,
        warmup_steps=1,
        k_core=1,
        max_history=3,
        save_every=100,
        progress=False,
        device="cpu",
        dtype="float64",
    )


def log_steps(folder: Path) -> list[int]:
    return [json.loads(x)["step"] for x in (folder / "train_log.jsonl").read_text().splitlines()]


def test_milestones_leave_training_unchanged(world, tmp_path):
    straight = run_sft(config(world, tmp_path / "straight"))
    cfg = config(world, tmp_path / "run" / "sft")
    stages = Stages(tmp_path / "timings.jsonl")
    snap2 = sft_until(cfg, 2, tmp_path / "run" / "step-2", stages)
    assert log_steps(snap2) == [1, 2]
    first = load_file(snap2 / "model.safetensors")
    # Killed after the stop, before (or while) writing the checkpoint: redone from the
    # state at step 2, not from step 3.
    shutil.rmtree(snap2)
    snap2 = sft_until(cfg, 2, snap2, stages)
    again = load_file(snap2 / "model.safetensors")
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert log_steps(sft_until(cfg, 4, tmp_path / "run" / "step-4", stages)) == [1, 2, 3, 4]
    final = sft_until(cfg, 6, tmp_path / "run" / "step-6", stages)
    assert final == cfg.out and log_steps(final) == list(range(1, 7))
    a, b = load_file(straight / "model.safetensors"), load_file(final / "model.safetensors")
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=EQUIV_ATOL)
    names = [json.loads(x)["stage"] for x in (tmp_path / "timings.jsonl").read_text().splitlines()]
    assert names == ["sft ->2", "sft ->2", "sft ->4", "sft ->6"]
