"""Grounding with the frozen backbone sharded by FSDP2 (``--fsdp``), 2 gloo processes on
CPU: the one-process rows up to the order of the floating-point sums, about half of the
backbone on each process, every frozen weight unchanged bit for bit, and a run paused
under FSDP2 resuming to the very rows of a straight one."""

from __future__ import annotations

import json

import pytest
import torch
import typer
from initworld import build_world
from launch import LR, STEPS, one_process, steps_of, torchrun, weights
from typer.testing import CliRunner

from gti.init.cli import init

EMBED, HEAD = "model.embed_tokens.weight", "lm_head.weight"


def shard_sizes(tensors: dict[str, torch.Tensor], world: int) -> list[int]:
    """Elements each process holds when every tensor is cut along dim 0 as FSDP2 cuts it
    (torch.chunk: ceil(rows / world) rows a process, the last ones fewer or none)."""
    sizes = [0] * world
    for t in tensors.values():
        per = -(-t.shape[0] // world)
        row = t[0].numel() if t.dim() > 1 else 1
        for rank in range(world):
            sizes[rank] += max(0, min(per, t.shape[0] - rank * per)) * row
    return sizes


@pytest.mark.numerics
@pytest.mark.parametrize(
    ("objective", "tied", "chat"),
    [("ce", True, True), ("ce+distill", False, False)],
    ids=["ce-tied-shared-prefix", "ce+distill-untied"],
)
def test_sharded_grounding_gives_the_one_process_rows(tmp_path, objective, tied, chat):
    """SGD, so that an update is linear in the gradient. Under FSDP2 every process gathers
    each layer's weights (a copy: the same numbers as one process holds) and runs its
    share of the batch, as under DDP; where a share would pick its own route (frozen
    prefix or not, one group of rows or two) the processes take the plainer one together.
    What differs from one process is the order of the sums: each new-row entry's gradient
    is a sum over the step's N answer tokens (and distillation positions), here summed per
    share, per group at its own padded width, then across processes. In float32 (unit
    roundoff u = 2^-24) such re-association changes a sum by at most about N u times its
    terms' size, so the rows may differ by about N u times the largest change of an entry,
    and each step rounds the rows it writes. Allowed, per matrix: 4 N u max|change| (4 for
    the errors the changed rows feed into later steps) + 2 u max|row| per step. A missing
    all-reduce, or a share left out, moves the rows by a share of the change itself.

    The chat world's examples share the system turn, so its key/value cache (SharedPrefix)
    runs under sharding; the untied world trains the head's rows apart."""
    world = build_world(tmp_path / "world", tied=tied, chat=chat)
    single = one_process(world, tmp_path / "one", objective)
    out = tmp_path / "fsdp"
    proc = torchrun(
        world, out, "--fsdp", "--optimizer", "sgd", "--lr", str(LR), "--objective", objective
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines() == [str(out)]  # printed once, by rank 0
    config = json.loads((out / "init_config.json").read_text())
    assert config["processes"] == 2 and config["grounding"]["fsdp"] is True

    one, two = weights(single), weights(out)
    assert set(two) == set(one)  # a tied head is saved once, as from one process
    # Each process held its shard of every weight of the extended model: half, exactly.
    assert config["parameters_per_process"] == shard_sizes(one, 2)
    total = sum(t.numel() for t in one.values())
    assert sum(config["parameters_per_process"]) == total
    assert max(config["parameters_per_process"]) <= 0.51 * total

    base = weights(world.model_dir)
    n_old = base[EMBED].shape[0]
    matrices = [EMBED] if tied else [EMBED, HEAD]
    for name, t in two.items():  # frozen: every weight but the new rows, bit for bit
        frozen = t[:n_old] if name in matrices else t
        assert frozen.equal(base[name][:n_old] if name in matrices else base[name]), name

    log_one, log_two = steps_of(single), steps_of(out)
    assert [r["answer_tokens"] for r in log_two] == [r["answer_tokens"] for r in log_one]
    n = max(r["answer_tokens"] + r.get("distill_positions", 0) for r in log_one)
    u = 2.0**-24
    for r1, r2 in zip(log_one, log_two, strict=True):  # a mean of n terms, re-associated
        assert abs(r1["loss"] - r2["loss"]) <= 4 * n * u * r1["loss"]
    for name in matrices:
        a, b = one[name][n_old:], two[name][n_old:]
        change = (a - base[name].mean(0)).abs().max()  # grounding starts from the mean
        assert change > 0
        tol = 4 * n * u * float(change) + 2 * STEPS * u * float(a.abs().max())
        assert float((a - b).abs().max()) <= tol, name


def test_a_run_paused_under_fsdp_resumes_to_the_straight_runs_rows(world, tmp_path):
    """AdamW (the paper's), the structure curve on (every process runs its forwards).
    --pause-after stops both processes after step 1 with the resume state saved (each
    exits 130); the same command then finishes. Same processes, same kernels, same
    reduction order: the rows are equal bit for bit."""
    flags = ("--fsdp", "--structure-every", "2", "--structure-permutations", "10")
    straight = torchrun(world, tmp_path / "straight", *flags)
    assert straight.returncode == 0, straight.stderr[-3000:]
    out = tmp_path / "paused"
    paused = torchrun(world, out, *flags, "--pause-after", "1")
    assert paused.returncode != 0
    assert "interrupted: stopped after step 1" in paused.stderr, paused.stderr[-3000:]
    assert (tmp_path / "paused.partial" / "state.pt").is_file() and not out.exists()
    done = torchrun(world, out, *flags)
    assert done.returncode == 0, done.stderr[-3000:]
    assert weights(out)[EMBED].equal(weights(tmp_path / "straight")[EMBED])
    curve = [
        r["step"] for r in map(json.loads, (out / "train_log.jsonl").open()) if "structure" in r
    ]
    assert curve == [0, 2, STEPS]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "several processes"),  # no launcher: this one process
        (["--strategy", "mean"], "trains nothing"),
        (["--items", "items.jsonl"], "drop-in route"),
    ],
)
def test_fsdp_that_cannot_shard_exits_2(world, args, says):
    app = typer.Typer()
    app.command("init")(init)
    app.command("noop")(lambda: None)  # two commands: `init` is a subcommand, as in gti
    out = world.root / "bad"
    res = CliRunner().invoke(
        app, ["init", "--sids", str(world.sids_dir), "-o", str(out), "--fsdp", *args]
    )
    assert res.exit_code == 2 and "--fsdp" in res.output and says in res.output, res.output
    assert not (world.root / "bad").exists()
