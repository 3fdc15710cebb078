"""Grounding on two processes (torchrun or accelerate, gloo on CPU): the same new rows as one
process up to the order of the floating-point sums; a run paused or killed under DDP resumes
to the very rows of a straight one; frozen rows never move, weight decay or not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from launch import LR, STEPS, embedding, one_process, steps_of, torchrun
from safetensors.torch import load_file

from gti.checkpoint_files import partial_dir
from gti.init.config import GroundingConfig, InitConfig
from gti.init.run import run_init


@pytest.mark.numerics
@pytest.mark.parametrize(
    ("objective", "launcher"),
    [("ce", "torchrun"), ("ce+distill", "torchrun"), ("ce", "accelerate")],
)
def test_two_processes_ground_the_rows_one_process_grounds(world, tmp_path, objective, launcher):
    """SGD, so that an update is linear in the gradient: each new-row entry's gradient
    is a sum over the step's N answer tokens, here summed in two shares and then across
    processes, and the shares' forward passes run at their own padded widths. In float32
    (unit roundoff u = 2^-24) such re-association changes a sum by at most about N u
    times its terms' size, so after the steps the rows may differ by about N u times
    the largest change of an entry, and each step rounds the rows it writes (u times
    their size). Allowed: 4 N u max|change| (4 for the errors the changed rows feed into
    later steps' gradients) + 2 u max|row| per step. A missing all-reduce, or a share
    left out, would move the rows by a share of the change itself. With distillation its
    matched positions are terms of the sums as well (N counts both)."""
    single = one_process(world, tmp_path / "one", objective)
    proc = torchrun(
        world,
        tmp_path / "two",
        *("--optimizer", "sgd", "--lr", str(LR), "--objective", objective),
        launcher=launcher,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    two = tmp_path / "two"
    assert proc.stdout.strip().splitlines() == [str(two)]  # printed once, by rank 0
    assert json.loads((two / "init_config.json").read_text())["processes"] == 2

    base = load_file(world.model_dir / "model.safetensors")["model.embed_tokens.weight"]
    a, b = embedding(single), embedding(two)
    n_old = base.shape[0]
    assert a[:n_old].equal(base) and b[:n_old].equal(base)  # frozen rows: untouched
    change = (a[n_old:] - base.mean(0)).abs().max()  # grounding starts from the mean
    assert change > 0
    one, two_log = steps_of(single), steps_of(two)
    assert [r["answer_tokens"] for r in two_log] == [r["answer_tokens"] for r in one]
    assert [r.get("distill_positions") for r in two_log] == [
        r.get("distill_positions") for r in one
    ]
    n = max(r["answer_tokens"] + r.get("distill_positions", 0) for r in one)
    u = 2.0**-24
    for r1, r2 in zip(one, two_log, strict=True):  # a mean of n terms, re-associated
        assert abs(r1["loss"] - r2["loss"]) <= 4 * n * u * r1["loss"]
    tol = 4 * n * u * float(change) + 2 * STEPS * u * float(a[n_old:].abs().max())
    assert float((a[n_old:] - b[n_old:]).abs().max()) <= tol


def test_a_run_paused_under_ddp_resumes_to_the_straight_runs_rows(world, tmp_path):
    """AdamW (the paper's). --pause-after stops both processes after step 1 with the
    resume state saved (each exits 130, which torchrun reports as a failure); the same
    command then finishes. Same processes, same
    kernels, same reduction order: the rows are equal bit for bit."""
    straight = torchrun(world, tmp_path / "straight")
    assert straight.returncode == 0, straight.stderr[-3000:]
    out = tmp_path / "paused"
    paused = torchrun(world, out, "--pause-after", "1")
    assert paused.returncode != 0
    assert "interrupted: stopped after step 1" in paused.stderr, paused.stderr[-3000:]
    assert (tmp_path / "paused.partial" / "state.pt").is_file() and not out.exists()
    done = torchrun(world, out)
    assert done.returncode == 0, done.stderr[-3000:]
    assert embedding(out).equal(embedding(tmp_path / "straight"))


def test_a_process_killed_under_ddp_resumes_to_the_straight_runs_rows(world, tmp_path):
    """A hard kill: rank 1 SIGKILLs itself right after step 3 of 6 (killed_init.py), torchrun
    tears rank 0 down, and nothing is written half-way. The state saved at step 2 (every 2
    steps) is what the same command resumes from, and it ends with the rows of a run never
    interrupted, bit for bit (same processes, kernels and reduction order); the original
    rows stay the base model's."""
    args = ("--steps", "6", "--save-every", "2")
    straight = torchrun(world, tmp_path / "straight", *args)
    assert straight.returncode == 0, straight.stderr[-3000:]
    out = tmp_path / "killed"
    script = (str(Path(__file__).with_name("killed_init.py")), "1", "3")
    killed = torchrun(world, out, *args, entry=script)
    assert killed.returncode != 0 and not out.exists()
    state = torch.load(partial_dir(out) / "state.pt", weights_only=False)
    assert state["step"] == 2, killed.stderr[-3000:]
    done = torchrun(world, out, *args)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not partial_dir(out).exists()
    assert embedding(out).equal(embedding(tmp_path / "straight"))
    base = load_file(world.model_dir / "model.safetensors")["model.embed_tokens.weight"]
    assert embedding(out)[: base.shape[0]].equal(base)
    moved = embedding(out)[base.shape[0] :] - base.mean(0)  # grounding starts from the mean
    assert float(moved.abs().max()) > 0


def test_weight_decay_never_reaches_the_frozen_rows(world, tmp_path):
    """The optimizer holds the new rows alone: AdamW's decoupled decay shrinks what it
    holds, so with decay on the original rows must still equal the base model's."""
    ckpt = run_init(
        InitConfig(
            sids=world.sids_dir, out=tmp_path / "wd", strategy="gti", device="cpu",
            grounding=GroundingConfig(steps=2, batch_size=4, weight_decay=0.5, progress=False),
        )
    )  # fmt: skip
    base = load_file(world.model_dir / "model.safetensors")["model.embed_tokens.weight"]
    assert embedding(ckpt)[: base.shape[0]].equal(base)


def test_a_batch_that_does_not_split_over_the_processes_is_refused(world, tmp_path):
    proc = torchrun(world, tmp_path / "odd", "--batch-size", "5")
    assert proc.returncode != 0  # each process exits 2; torchrun reports a failure
    assert "--batch-size" in proc.stderr and "2 processes" in proc.stderr
