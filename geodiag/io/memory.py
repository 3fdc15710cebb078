"""Rows in memory: a numpy array, a torch tensor, or a model's embedding modules.

The same :class:`~geodiag.io.checkpoint.Checkpoint` the file readers build, over a store
whose rows come from memory, so ``geodiag.measure(model)`` returns exactly what
``geodiag metrics`` computes from the saved folder. torch is never imported here: a
torch tensor or module brings its own module along, and is handled by duck typing.

Rows of a model are read through its modules, so a PEFT model gives its *effective*
rows: the input embedding is called on the token ids (a LoRA embedding adds
``B @ A * scaling``, trainable tokens substitute their rows, ``modules_to_save`` uses
the trained copy), and an output head's rows come from its active weight.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from geodiag.errors import InputError

RowReader = Callable[[np.ndarray], np.ndarray]  # ids (k,) int64 -> rows (k, d) float64


def is_torch(obj: object) -> bool:
    return type(obj).__module__.split(".")[0] == "torch"


def _torch_dtype(t) -> str:
    name = str(t.dtype).removeprefix("torch.")
    return {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64"}.get(
        name, name
    )


def _numpy_dtype(a: np.ndarray) -> str:
    return {"float32": "F32", "float16": "F16", "float64": "F64"}.get(a.dtype.name, a.dtype.name)


@dataclass
class MemoryMatrix:
    name: str
    shape: tuple[int, int]
    dtype: str
    read: RowReader


class MemoryStore:
    """The :class:`~geodiag.io.store.TensorStore` protocol over in-memory matrices."""

    def __init__(self, matrices: list[MemoryMatrix], description: str) -> None:
        self._m = {m.name: m for m in matrices}
        self.description = description

    def _get(self, name: str) -> MemoryMatrix:
        try:
            return self._m[name]
        except KeyError:
            raise InputError(self.description, f"no matrix named '{name}'") from None

    def names(self) -> list[str]:
        return list(self._m)

    def shape(self, name: str) -> tuple[int, ...]:
        return self._get(name).shape

    def dtype(self, name: str) -> str:
        return self._get(name).dtype

    def file_of(self, name: str) -> Path:
        return Path(f"<{self.description}: {name}>")

    def read_rows(self, name: str, rows: np.ndarray) -> np.ndarray:
        m = self._get(name)
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= m.shape[0]):
            raise InputError(
                self.file_of(name), f"row ids out of range for a matrix of {m.shape[0]} rows"
            )
        return m.read(rows)

    def read_block(self, name: str, start: int, stop: int, float32: bool = False) -> np.ndarray:
        """Rows ``start:stop`` as float64, or float32 when asked and exact (as the file
        stores do: only a float64 matrix would lose digits)."""
        rows = self.read_rows(name, np.arange(start, stop, dtype=np.int64))
        exact32 = float32 and self.dtype(name) != "F64"
        return rows.astype(np.float32) if exact32 else rows

    def digests(self) -> dict[str, str]:
        return {}


def array_matrix(name: str, x) -> MemoryMatrix:
    """A (V, d) numpy array or torch tensor; rows are read (and converted) only when asked."""
    if is_torch(x):
        if x.ndim != 2:
            raise InputError(f"<{name}>", f"expected a (vocab, dim) matrix, got {list(x.shape)}")
        return MemoryMatrix(name, tuple(x.shape), _torch_dtype(x), _torch_rows(x))
    a = np.asarray(x)
    if a.ndim != 2:
        raise InputError(f"<{name}>", f"expected a (vocab, dim) matrix, got shape {list(a.shape)}")
    if not np.issubdtype(a.dtype, np.floating):
        raise InputError(f"<{name}>", f"expected floating-point rows, got dtype {a.dtype}")
    return MemoryMatrix(
        name, tuple(a.shape), _numpy_dtype(a), lambda ids: a[ids].astype(np.float64)
    )


def _torch_rows(t) -> RowReader:
    import torch  # the caller handed us a tensor: torch is loaded already

    def read(ids: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            index = torch.from_numpy(ids).to(t.device)
            return t.detach()[index].to(torch.float64).cpu().numpy()

    return read


def _weight_rows(head) -> RowReader:
    """Rows of a head's active weight. PEFT may rebuild that weight (V, d) on each access,
    so it is taken once per reader: a reader lives for one measurement."""
    import torch

    cache: list = []

    def read(ids: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            if not cache:
                cache.append(_active_weight(head).detach())
            w = cache[0]
            return w[torch.from_numpy(ids).to(w.device)].to(torch.float64).cpu().numpy()

    return read


def _module_rows(module) -> RowReader:
    """Rows as the module computes them: ``module(ids)``, the effective embedding."""
    import torch

    def read(ids: np.ndarray) -> np.ndarray:
        device = next(module.parameters()).device
        with torch.no_grad():
            out = module(torch.from_numpy(ids).to(device))  # (k, d)
        return out.detach().to(torch.float64).cpu().numpy()

    return read


def _base_layer(module):
    """The innermost wrapped layer: PEFT tuner layers expose ``get_base_layer()``, its
    ``modules_to_save`` / trainable-tokens wrappers ``original_module``."""
    for _ in range(16):  # wrappers nest a few levels at most
        inner = None
        if hasattr(module, "get_base_layer"):
            inner = module.get_base_layer()
        elif getattr(module, "original_module", None) is not None:
            inner = module.original_module
        if inner is None or inner is module:
            return module
        module = inner
    return module


def _active_weight(module):
    """The weight a (possibly PEFT-wrapped) linear head multiplies with, (V, d).

    PEFT's ``modules_to_save`` and trainable-tokens wrappers answer ``.weight`` with the
    active adapter's weight (the trained copy; the base with the trained rows put in);
    a LoRA layer's ``.weight`` is the base, to which the unmerged deltas are added.
    """
    w = module.weight
    merged = getattr(module, "get_merged_weights", None)  # a trainable-tokens layer itself
    if callable(merged) and not getattr(module, "merged", False):
        if not getattr(module, "disable_adapters", False) and module.active_adapters:
            return merged(module.active_adapters)
    lora_a = getattr(module, "lora_A", None)
    if lora_a is not None and not getattr(module, "merged", False):
        if not getattr(module, "disable_adapters", False):
            for name in getattr(module, "active_adapters", []):
                if name in lora_a:
                    w = w + module.get_delta_weight(name)
    return w


def partitioned_embeddings(model) -> list:
    """The embedding parameters that DeepSpeed ZeRO-3 has partitioned (they carry ``ds_id``)."""
    modules = [model.get_input_embeddings()]
    if hasattr(model, "get_output_embeddings") and model.get_output_embeddings() is not None:
        modules.append(model.get_output_embeddings())
    unique = {id(p): p for m in modules for p in m.parameters() if hasattr(p, "ds_id")}
    return list(unique.values())  # a tied head shares the embedding's parameter


def gathered(model):
    """Context in which ZeRO-3 partitioned embedding parameters are whole (a collective:
    every rank must enter it). Without partitioned parameters it does nothing; with them
    and no importable deepspeed it raises :class:`InputError`."""
    import contextlib

    if not hasattr(model, "get_input_embeddings"):  # an array or a tensor: nothing to gather
        return contextlib.nullcontext()
    params = partitioned_embeddings(model)
    if not params:
        return contextlib.nullcontext()
    try:
        import deepspeed
    except ImportError:
        raise InputError(
            "<model>",
            "the embedding is ZeRO-3 partitioned but deepspeed cannot be imported to gather it",
        ) from None
    return deepspeed.zero.GatheredParameters(params, modifier_rank=None)


def model_matrices(model, probe_ids: np.ndarray | None = None) -> tuple[list[MemoryMatrix], bool]:
    """(input [, output head], tied?) of a transformers (or PEFT) model, as it computes now.

    Tied means the head multiplies with the very rows the input embedding returns. Shared
    storage is not enough under PEFT: ``modules_to_save`` or LoRA on a tied embedding
    change the input rows only, so the head still sees the original ones. When either
    side is wrapped, the rows of ``probe_ids`` decide.
    """
    if not hasattr(model, "get_input_embeddings"):
        raise InputError("<model>", f"{type(model).__name__} has no get_input_embeddings()")
    emb = model.get_input_embeddings()
    base = _base_layer(emb)
    weight = base.weight
    shape = tuple(weight.shape)
    if len(shape) != 2 or shape[0] == 0:
        raise InputError(
            "<model>",
            f"input embedding weight has shape {list(shape)}: partitioned (ZeRO-3)? "
            "gather it first, or measure the saved checkpoint",
        )
    plain = emb is base and type(emb).__module__.startswith("torch.nn")
    read = _torch_rows(weight) if plain else _module_rows(emb)
    matrices = [MemoryMatrix("input embedding", shape, _torch_dtype(weight), read)]
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None:
        return matrices, True
    shares = _base_layer(head).weight.data_ptr() == weight.data_ptr()
    wrapped = emb is not base or head is not _base_layer(head)
    head_read = _weight_rows(head)
    if shares and not wrapped:
        return matrices, True
    if shares and probe_ids is not None and np.array_equal(read(probe_ids), head_read(probe_ids)):
        return matrices, True
    w = _active_weight(head)
    if tuple(w.shape) != shape:
        raise InputError(
            "<model>", f"output head is {list(w.shape)} but the input embedding is {list(shape)}"
        )
    matrices.append(MemoryMatrix("output head", shape, _torch_dtype(w), head_read))
    return matrices, False
