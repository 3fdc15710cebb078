"""FSDP2 for grounding (``--fsdp``): the frozen backbone sharded over the launched processes.

For a backbone that does not fit one device. Each decoder layer, then the root (what is
left: the embedding, the final norm and the head, one group, so a tied head stays tied),
is ``fully_shard``-ed over a 1-D DeviceMesh of the processes (gloo on CPU, nccl on CUDA):
each process keeps about 1/N of every weight. The new rows stay the small replicated
``NewRows`` of data-parallel grounding (gti.init.parallel): each process runs its share
of the step's batch, their gradient is all-reduced, the optimizer holds them alone.

Grounding's fast route calls the decoder and reads the embedding and the head itself
(gti.init.grounding), never the model's forward. FSDP2's hooks sit on each layer, which
gathers its weights around each call and again for its backward (the gradient flows
through it to the rows; no weight takes one, so nothing is reduce-scattered). The root's
weights are gathered for a whole step by :func:`whole_root`, as FSDP2 keeps a root whole
from its forward to the end of its backward. A gather is a copy: a layer computes what it
computes unsharded.

A layer's gather is a collective, so every process must call each layer as often as the
others. Where the route decides from the data how often (frozen prefix or whole rows, one
group of rows or two: gti.init.grounding), each process's share would decide for itself;
under sharding the processes agree first (``gti.init.parallel.on_any_process``: one flag
all-reduced, the plainer route taken by all when one process needs it). A share may then
run at another grouping than under DDP: the same sums in another order.

What the route needs of the frozen model holds sharded: the frozen prefix's key/value
cache (activations, not weights), token distillation's teacher (a forward under
``no_grad``: the layers gather and free), activation checkpointing (a replayed layer
gathers again), the structure curve (every process runs the probe's forwards).

At the end the weights are gathered whole on rank 0's CPU (:func:`gathered_weights`), the
trained rows written into them, and saved from there.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from transformers import PreTrainedModel

from geodiag.errors import InputError
from gti.init.grounding import NewRows
from gti.init.parallel import Group, sharded


def decoder_layers(model: PreTrainedModel) -> nn.ModuleList:
    """The decoder's layers (``model.get_decoder().layers``, as every HF causal LM names them)."""
    layers = getattr(model.get_decoder(), "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise InputError(
            "--fsdp",
            f"{type(model).__name__} has no decoder.layers to shard one by one; "
            "ground it without --fsdp",
        )
    return layers


def shard_backbone(model: PreTrainedModel, group: Group, device: torch.device) -> None:
    """Shard the frozen ``model`` (on the CPU; its shards move to ``device``) over the
    processes of ``group``: each decoder layer, then the root."""
    if device.type == "cuda":
        torch.cuda.set_device(device)
    mesh = init_device_mesh(device.type, (group.world,))
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    # FSDP2 takes as root the first module that runs forward; grounding calls the layers
    # directly, so one token goes through the model itself first. A root stays whole after
    # its forward (for the backward, which this one has not): sharded again by hand.
    with torch.no_grad():
        model(input_ids=torch.zeros(1, 1, dtype=torch.long, device=device), use_cache=False)
    model.reshard()  # type: ignore[operator]


@contextmanager
def whole_root(model: nn.Module) -> Iterator[None]:
    """The root's own weights (embedding, final norm, head) gathered while the block runs;
    the layers gather theirs in their hooks. Nothing when ``model`` is not sharded."""
    if not sharded(model):
        yield
        return
    model.unshard()  # type: ignore[operator]
    try:
        yield
    finally:
        model.reshard()  # type: ignore[operator]


def local_parameters(model: nn.Module) -> int:
    """Parameters this process holds: its shards' elements (each tied weight once)."""
    unique = {id(p): p for p in model.parameters()}.values()
    return sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in unique)


def parameter_names(model: nn.Module, weight: nn.Parameter) -> list[str]:
    """Every name of ``weight`` in ``model`` (a tied embedding has two)."""
    return [n for n, p in model.named_parameters(remove_duplicate=False) if p is weight]


def gathered_weights(model: PreTrainedModel, rows: NewRows) -> dict[str, torch.Tensor] | None:
    """The whole model's weights on rank 0's CPU with the trained rows written in (a
    collective: every process calls it); None on the other processes. A tied head's name
    holds the embedding's very tensor, so ``save_pretrained`` writes it once, as it does
    from an unsharded model."""
    # Imported here: about a second on 2 cores, and only a sharded run's save needs it.
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    inp = parameter_names(model, model.get_input_embeddings().weight)
    out = parameter_names(model, model.get_output_embeddings().weight)
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_model_state_dict(model, options=options)
    if not state:
        return None
    ids = rows.ids.cpu()
    with torch.no_grad():
        state[inp[0]][ids] = rows.inp.detach().cpu()
        for name in inp[1:]:
            state[name] = state[inp[0]]
        if rows.out is not None:
            state[out[0]][ids] = rows.out.detach().cpu()
    return state
