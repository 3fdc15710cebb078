"""Grounding on several processes (``torchrun`` / ``accelerate launch -m gti.cli init``).

Data parallel over the new rows: every process holds the frozen model and the same
``NewRows``; step ``s``'s global batch (``PairStream.batch(s)``, a pure function of the
seed and ``s``) is cut into one contiguous share per process; each share's summed token
loss is divided by the step's global answer-token count, and the new rows' gradients are
summed over processes (one all-reduce of an (n_new, d) tensor: the frozen weights carry
no gradient). The update is then the one-process update on the whole batch, up to the
order of the floating-point sums. Only rank 0 saves resume state, measures the structure
curve and writes the checkpoint; a stop (signal, ``--pause-after``) is agreed by all.

Frozen rows stay untouched by construction: the optimizer holds only ``NewRows``'s
parameters, so neither its state nor AdamW's decoupled weight decay ever reaches an
original row (a gradient mask on the full matrix would let the decay shrink them).

With ``--fsdp`` the frozen model is sharded as well (gti.init.sharding); its layers are then
collectives, and :func:`on_any_process` lets the processes take a data-dependent branch
together.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FSDPModule


@dataclass(frozen=True)
class Group:
    """This process's place in the run: rank, world size, and whether it leads."""

    rank: int = 0
    world: int = 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def share(self, n: int) -> slice:
        """This rank's contiguous share of ``n`` batch rows (``n`` divisible by world)."""
        per = n // self.world
        return slice(self.rank * per, (self.rank + 1) * per)

    def sum_(self, t: torch.Tensor) -> torch.Tensor:
        """All-reduce ``t`` in place (sum) when there are several processes."""
        if self.world > 1:
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t

    def any(self, flag: bool, device: torch.device) -> bool:
        """Whether ``flag`` holds on any process."""
        if self.world == 1:
            return flag
        t = torch.tensor([float(flag)], device=device)
        return bool(self.sum_(t).item() > 0)

    def gather(self, value: int) -> list[int]:
        """``value`` of every process, by rank."""
        if self.world == 1:
            return [value]
        values: list[int] = [0] * self.world
        dist.all_gather_object(values, value)
        return values

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()


def main_process() -> bool:
    """Whether this is rank 0 of a launched run (or the only process): it alone prints."""
    return os.environ.get("RANK", "0") == "0"


def launched_world() -> int:
    """Processes the launcher started (torchrun / accelerate set WORLD_SIZE)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def join(device: torch.device) -> Group:
    """The process group of a launched run (gloo on CPU, nccl on CUDA), or one process."""
    world = launched_world()
    if world == 1:
        return Group()
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return Group(dist.get_rank(), dist.get_world_size())


def local_device(device: torch.device) -> torch.device:
    """Each process's own GPU under a launcher (LOCAL_RANK); the CPU stays the CPU."""
    if device.type == "cuda" and launched_world() > 1:
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return device


def sharded(model: nn.Module) -> bool:
    """Whether ``model``'s weights are sharded by FSDP2 (``--fsdp``, gti.init.sharding)."""
    return isinstance(model, FSDPModule)


def on_any_process(model: nn.Module, flag: bool) -> bool:
    """Whether ``flag`` holds on any process, where ``model`` is sharded (a collective:
    every process asks at the same point); ``flag`` itself otherwise."""
    if not sharded(model):
        return flag
    t = torch.tensor([float(flag)], device=next(model.parameters()).device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return bool(t.item() > 0)
