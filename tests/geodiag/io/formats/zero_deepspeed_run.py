"""Write the DeepSpeed fixtures of test_zero.py from a real 2-rank run (gloo, CPU).

Each rank builds the same tiny untied model as dcp_fsdp2_run.py (122 rows: 61 per rank),
freezes its output head (so ``frozen_param_fragments`` hold it, not the fp32 partitions),
and, for ZeRO stage 3 then 2, wraps it with ``deepspeed.initialize`` (``DS_ACCELERATOR=cpu``,
bf16 training with fp32 master weights, the torch Adam passed as the client optimizer so
that no DeepSpeed op is compiled for it), takes one step and saves with
``engine.save_checkpoint`` into ``zero3/`` and ``zero2/``: ``global_step1/``, ``latest``
and the ``zero_to_fp32.py`` script beside. ``zero3_tied/``: the same model with its head
tied to the embedding (DeepSpeed keeps one tensor and records the head in
``shared_params``), trained whole under ZeRO-3. A module of its own so that the spawned
processes can import the worker by name.
"""

from __future__ import annotations

import os
from pathlib import Path

# folder -> (ZeRO stage, tied head)
RUNS = {"zero3": (3, False), "zero2": (2, False), "zero3_tied": (3, True)}


def config(stage: int) -> dict:
    return {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": stage},
        "zero_allow_untested_optimizer": True,
        "bf16": {"enabled": True},
    }


def worker(rank: int, world: int, root: str, port: int, n_rows: int) -> None:
    # The variables a launcher sets: deepspeed.initialize joins the gloo group with them.
    from dcp_fsdp2_run import torchrun_env

    os.environ.update(torchrun_env(rank, world, port), DS_ACCELERATOR="cpu")
    import deepspeed
    import torch
    import torch.distributed as dist
    from dcp_fsdp2_run import model

    torch.set_num_threads(1)
    for folder, (stage, tied) in RUNS.items():
        m = model(n_rows, tied)
        if not tied:
            m.lm_head.weight.requires_grad_(False)
        trained = [p for p in m.parameters() if p.requires_grad]
        opt = torch.optim.Adam(trained, lr=1e-2)
        engine, *_ = deepspeed.initialize(model=m, optimizer=opt, config=config(stage))
        x = torch.arange(16).reshape(2, 8) % n_rows
        engine.backward(engine(input_ids=x, labels=x).loss)
        engine.step()
        engine.save_checkpoint(str(Path(root) / folder))
        dist.barrier()
