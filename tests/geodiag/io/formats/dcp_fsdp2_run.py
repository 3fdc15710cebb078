"""Write the DCP fixtures of test_dcp.py from a real 2-rank FSDP2 run (gloo, CPU).

Each rank builds the same tiny model (an odd number of rows: the two shards differ by a
row), shards it with ``fully_shard``, takes one Adam step (so the optimizer holds
``exp_avg`` beside every weight) and saves with ``dcp.save``:

- ``fsdp2/``: ``model.state_dict()``, as FSDP2's own examples save;
- ``checkpoint-1/pytorch_model_fsdp_0/``: ``{"model": ..., "optim": ...}`` from
  ``get_state_dict``, the nested names of accelerate's sharded save, optimizer included.

A module of its own so that the spawned processes can import the worker by name.
"""

from __future__ import annotations

import os
from pathlib import Path

from tiny_models import tiny_lm

N_WORDS, N_SIDS, DIM = 100, 21, 16  # 122 rows with <unk>: 61 per rank


def torchrun_env(rank: int, world: int, port: int) -> dict[str, str]:
    """The variables torchrun sets for a rank on one machine: accelerate and DeepSpeed read
    them to join the gloo group themselves (the workers beside this module)."""
    return {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(world),
    }


def model(n_rows: int, tied: bool = False):
    """The tiny Llama (untied unless asked), its new rows each their own random start."""
    import torch

    m = tiny_lm(n_rows, hidden_size=DIM, tied=tied, seed=0)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        w = m.get_input_embeddings().weight
        w[-N_SIDS:] = torch.randn(N_SIDS, DIM, generator=g) * w[:-N_SIDS].std()
    return m


def worker(rank: int, world: int, root: str, port: int, n_rows: int) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.fsdp import fully_shard

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        m = model(n_rows)
        for layer in m.model.layers:
            fully_shard(layer)
        fully_shard(m)
        opt = torch.optim.Adam(m.parameters(), lr=1e-2)
        x = torch.arange(16).reshape(2, 8) % n_rows
        m(input_ids=x, labels=x).loss.backward()
        opt.step()
        dcp.save(m.state_dict(), checkpoint_id=str(Path(root) / "fsdp2"))
        msd, osd = get_state_dict(m, opt)
        sharded = Path(root) / "checkpoint-1" / "pytorch_model_fsdp_0"
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=str(sharded))
        dist.barrier()
    finally:
        dist.destroy_process_group()
