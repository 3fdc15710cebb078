"""One training run with GeodiagCallback, single-process or one rank of a gloo group.

A minimal explicit loop that calls the callback's hooks as ``transformers.Trainer`` does
(on_train_begin; per optimizer step on_step_begin, forward/backward,
on_pre_optimizer_step, optimizer.step, on_optimizer_step, zero_grad, global_step += 1,
on_step_end), the model passed to the hooks being the unwrapped one, as Trainer passes
``self.model``. The Trainer itself is not used here: accelerate's FSDP2 path wants a
device, and a loop keeps two CPU processes within seconds.

The global batch of each step is fixed (``BATCH`` sequences); rank r of w trains on its
r-th slice, so w ranks average the gradient of the same sequences that one process
takes whole. SGD without momentum: an update is linear in the gradient, so rounding
differences stay of the order of float32 rounding (Adam's first steps divide by
|gradient|, which turns a rounding difference of a near-zero entry into a whole lr).
Imported by tests/geodiag/callback/test_trainer_distributed.py; a module of its own so that the
spawned processes can import the worker by name (they inherit the parent's sys.path, which
holds tests/geodiag for tiny_models).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from tiny_models import tiny_lm

VOCAB, DIM, STEPS, BATCH, LR = 120, 16, 4, 8, 0.5
LEVELS = {"a": list(range(100, 110)), "b": list(range(110, 120))}
BOOKS = {name: np.random.default_rng(i).normal(size=(10, 3)) for i, name in enumerate(LEVELS)}


def mean_init_model(tie: bool = True):
    """A tiny Llama whose new rows are all the mean of the original ones (one identical
    group). Also the model of tests/geodiag/callback/test_trainer_callback.py."""
    import torch

    model = tiny_lm(VOCAB, hidden_size=DIM, tied=tie, seed=0)
    with torch.no_grad():
        w = model.get_input_embeddings().weight
        w[100:] = w[:100].mean(dim=0)
    return model


def batch(step: int):
    """(BATCH, 8) sequences of step ``step``: original tokens and level a's only, so level
    b's input rows get no gradient (the head is untied) and stay where they are."""
    import torch

    g = torch.Generator().manual_seed(1000 + step)
    x = torch.cat(
        [
            torch.randint(0, 100, (BATCH, 4), generator=g),
            torch.randint(100, 110, (BATCH, 4), generator=g),
        ],
        dim=1,
    )
    return x


def callback(on_untrained: str):
    from geodiag.callback import GeodiagCallback

    return GeodiagCallback(
        levels=LEVELS,
        codebooks=BOOKS,
        every_n_steps=1,
        rsa_sample=10,
        rsa_permutations=20,
        gate_on_save=False,
        untrained_after_steps=STEPS,
        on_untrained=on_untrained,
    )


def train(out: Path, *, rank: int = 0, world: int = 1, mode: str = "single", on_untrained="warn"):
    """Train STEPS steps; the callback writes ``out``/geodiag_trajectory.jsonl. Returns what
    the test compares: the final new rows and this rank's stop decision."""
    import torch
    import transformers

    torch.set_num_threads(1)  # the same GEMM blocking in every process
    model = mean_init_model(tie=False)
    wrapped = model
    if mode == "ddp":
        wrapped = torch.nn.parallel.DistributedDataParallel(model)
    elif mode == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)  # the root holds the embedding and the head: sharded by rows
    weight = model.get_input_embeddings().weight
    local = weight.to_local() if type(weight).__name__ == "DTensor" else weight
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    cb = callback(on_untrained)
    state = transformers.TrainerState(
        global_step=0, max_steps=STEPS, is_world_process_zero=rank == 0
    )
    control = transformers.TrainerControl()
    args = SimpleNamespace(output_dir=str(out), report_to=[])
    kw = {"model": model}
    cb.on_train_begin(args, state, control, **kw)
    per_rank = BATCH // world
    for step in range(STEPS):
        control = cb.on_step_begin(args, state, control, **kw) or control
        x = batch(step)[rank * per_rank : (rank + 1) * per_rank]
        wrapped(input_ids=x, labels=x).loss.backward()
        control = cb.on_pre_optimizer_step(args, state, control, **kw) or control
        opt.step()
        control = cb.on_optimizer_step(args, state, control, **kw) or control
        opt.zero_grad()
        state.global_step += 1
        control = cb.on_step_end(args, state, control, **kw) or control
    from geodiag.io.formats.memory import gathered

    with gathered(model):  # the final rows, whole (FSDP2: a collective)
        w = model.get_input_embeddings().weight.detach()
        rows = w[100:].double().numpy().copy()
    return {
        "rows": rows.tolist(),
        "stop": bool(control.should_training_stop),
        "local_rows": int(local.shape[0]),  # rows of the embedding this rank holds
    }


def worker(rank: int, world: int, mode: str, root: str, port: int, on_untrained: str) -> None:
    """A spawned rank: joins the gloo group, trains, writes its result as JSON."""
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        out = Path(root) / f"rank{rank}"
        result = train(out, rank=rank, world=world, mode=mode, on_untrained=on_untrained)
        (Path(root) / f"result{rank}.json").write_text(json.dumps(result))
        # Leave together: a rank that tears down while the other still ends its run (the
        # main rank measures and writes last) closes gloo's connections under it, and the
        # other aborts ("terminate called without an active exception", about 1 run in 30
        # on a busy machine).
        dist.barrier()
    finally:
        dist.destroy_process_group()
