"""One rank of a 2-rank FSDP2 run (gloo, CPU) whose sharded checkpoint accelerate writes,
for tests/geodiag/io/formats/test_dcp_accelerate.py.

What the Trainer does to save a sharded FSDP checkpoint (transformers 5.24,
``Trainer._save_optimizer_and_scheduler``) is two calls into accelerate (1.15):
``save_fsdp_model(plugin, accelerator, model, output_dir, **get_fsdp_ckpt_kwargs())`` and
``save_fsdp_optimizer(plugin, accelerator, optimizer, model, output_dir)``; accelerate's own
``Accelerator.save_state`` makes the same two calls. This rank makes them as the Trainer
does, with a real ``FullyShardedDataParallelPlugin(fsdp_version=2,
state_dict_type="SHARDED_STATE_DICT")``, a real ``Accelerator`` (which joins the gloo group)
and a model sharded by ``torch.distributed.fsdp.fully_shard``, after 2 Adam steps.

What is not the Trainer's: on CPU accelerate drops the FSDP plugin (the distributed type
stays MULTI_CPU, test_dcp_trainer.py pins it), so neither the Trainer nor ``save_state``
reaches these calls, and ``accelerator.prepare`` would wrap in DDP. The model is therefore
sharded here with ``fully_shard`` (per decoder layer, then the root: what the plugin's
``transformer_layer_cls_to_wrap`` asks of accelerate's ``fsdp2_prepare_model``), and the
calls are made here. The accelerator is only passed through: with a sharded state dict
neither function reads it. Beside the two folders, what ``_save_checkpoint`` writes on that
path: ``trainer_state.json`` (transformers' ``TrainerState.save_to_json``), and
``scheduler.pt`` and ``rng_state_{rank}.pth`` (``torch.save`` of what the Trainer saves).
``save_model`` writes nothing there with a sharded state dict: no config.json, no
tokenizer. The rank writes what it ran under beside the output folder, for the test to pin.

A module of its own so that the spawned processes can import the worker by name.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

STEPS = 2


def worker(rank: int, world: int, root: str, port: int, n_rows: int) -> None:
    import numpy as np
    import torch
    import torch.distributed as dist
    import transformers
    from accelerate import Accelerator
    from accelerate.utils import (
        FullyShardedDataParallelPlugin,
        save_fsdp_model,
        save_fsdp_optimizer,
    )

    # The variables torchrun sets: accelerate reads them to join the gloo group itself.
    from dcp_fsdp2_run import model, torchrun_env
    from torch.distributed.fsdp import FSDPModule, fully_shard
    from transformers.distributed.fsdp import get_fsdp_ckpt_kwargs

    os.environ.update(torchrun_env(rank, world, port))
    torch.set_num_threads(1)
    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2,
        state_dict_type="SHARDED_STATE_DICT",
        transformer_cls_names_to_wrap=["LlamaDecoderLayer"],
    )
    accelerator = Accelerator(cpu=True, fsdp_plugin=plugin)
    try:
        m = model(n_rows)
        for layer in m.model.layers:
            fully_shard(layer)
        fully_shard(m)
        opt = torch.optim.Adam(m.parameters(), lr=1e-2)
        scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
        x = torch.arange(16).reshape(2, 8) % n_rows
        for _ in range(STEPS):
            m(input_ids=x, labels=x).loss.backward()
            opt.step()
            scheduler.step()
            opt.zero_grad()
        ckpt = Path(root) / "out" / f"checkpoint-{STEPS}"
        save_fsdp_model(plugin, accelerator, m, str(ckpt), **get_fsdp_ckpt_kwargs())
        save_fsdp_optimizer(plugin, accelerator, opt, m, str(ckpt))
        rng = {
            "python": random.getstate(),
            "numpy": np.random.get_state(),
            "cpu": torch.random.get_rng_state(),
        }
        torch.save(rng, ckpt / f"rng_state_{rank}.pth")
        if rank == 0:
            torch.save(scheduler.state_dict(), ckpt / "scheduler.pt")
            transformers.TrainerState(global_step=STEPS, max_steps=STEPS).save_to_json(
                str(ckpt / "trainer_state.json")
            )
            embed = m.get_input_embeddings().weight
            run = {
                "distributed_type": str(accelerator.distributed_type),
                "fsdp_plugin_kept": getattr(accelerator.state, "fsdp_plugin", None) is not None,
                "sharded": isinstance(m, FSDPModule),
                "state_dict_type": str(plugin.state_dict_type),
                "fsdp_version": plugin.fsdp_version,
                "embedding_rows_on_rank_0": embed.to_local().shape[0],
            }
            (Path(root) / "run.json").write_text(json.dumps(run))
        dist.barrier()
    finally:
        dist.destroy_process_group()
