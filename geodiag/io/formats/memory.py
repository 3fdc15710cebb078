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
    """The :class:`~geodiag.io.formats.tensor_store.TensorStore` protocol over in-memory matrices."""

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

    def read_rows(self, name: str, rows: np.ndarray, float32: bool = False) -> np.ndarray:
        m = self._get(name)
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= m.shape[0]):
            raise InputError(
                self.file_of(name), f"row ids out of range for a matrix of {m.shape[0]} rows"
            )
        out = m.read(rows)
        return out.astype(np.float32) if float32 and self.dtype(name) != "F64" else out

    def read_block(self, name: str, start: int, stop: int, float32: bool = False) -> np.ndarray:
        """Rows ``start:stop`` as float64, or float32 when asked and exact (as the file
        stores do: only a float64 matrix would lose digits)."""
        return self.read_rows(name, np.arange(start, stop, dtype=np.int64), float32)

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
    modules = _embedding_modules(model)
    unique = {id(p): p for m in modules for p in m.parameters() if hasattr(p, "ds_id")}
    return list(unique.values())  # a tied head shares the embedding's parameter


def _embedding_modules(model) -> list:
    modules = [model.get_input_embeddings()]
    if hasattr(model, "get_output_embeddings") and model.get_output_embeddings() is not None:
        modules.append(model.get_output_embeddings())
    return modules


def _is_fsdp2(module) -> bool:
    return any(c.__name__ == "FSDPModule" for c in type(module).__mro__)


def fsdp_owners(model) -> list:
    """The FSDP2 (``fully_shard``) modules whose sharded parameters include the embedding
    (or the head): the innermost ``fully_shard``-ed module around each, since FSDP2 gives a
    parameter to the closest such module that contains it. Empty when nothing is sharded
    (the parameters are DTensors only while sharded)."""
    named = list(model.named_modules())
    fsdp = [(name, m) for name, m in named if _is_fsdp2(m)]
    if not fsdp:
        return []
    where = {id(m): name for name, m in named}
    owners = {}
    for module in _embedding_modules(model):
        if not any(type(p).__name__ == "DTensor" for p in module.parameters()):
            continue
        name = where.get(id(module), "")
        around = [(n, m) for n, m in fsdp if n == "" or name == n or name.startswith(n + ".")]
        if around:
            owner = max(around, key=lambda nm: len(nm[0]))[1]
            owners[id(owner)] = owner
    return list(owners.values())


def _unsharded(owners: list):
    """FSDP2's own gather: ``unshard()`` puts whole (plain) parameters in the modules until
    ``reshard()``. Both are collectives."""
    import contextlib

    @contextlib.contextmanager
    def context():
        for m in owners:
            m.unshard()
        try:
            yield
        finally:
            for m in owners:
                m.reshard()

    return context()


def gathered(model):
    """Context in which sharded embedding parameters are whole: DeepSpeed ZeRO-3
    partitioned ones, or FSDP2 (``fully_shard``, DTensor) sharded ones. A collective: every
    rank must enter it. Without sharded parameters it does nothing; with ZeRO-3 ones and no
    importable deepspeed it raises :class:`InputError`."""
    import contextlib

    if not hasattr(model, "get_input_embeddings"):  # an array or a tensor: nothing to gather
        return contextlib.nullcontext()
    owners = fsdp_owners(model)
    if owners:
        return _unsharded(owners)
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


def _row_grad(weight, ids: np.ndarray):
    """Rows ``ids`` of ``weight.grad`` as float64 (k, d), or None without a gradient. A
    DTensor gradient (FSDP2) is gathered whole first: a collective, every rank calls it."""
    import torch

    g = weight.grad
    if g is None:
        return None
    if type(g).__name__ == "DTensor":
        g = g.full_tensor()
    with torch.no_grad():
        return g.detach()[torch.from_numpy(ids).to(g.device)].to(torch.float64).cpu().numpy()


def _embedding_grad(module, ids: np.ndarray):
    """The gradient of the new rows of an input embedding: its weight's rows, or for PEFT
    trainable tokens their delta's (rows it does not train get none: zero). None when the
    rows' gradient is not a slice of one parameter (LoRA on the embedding)."""
    if _base_layer(module) is module:
        return _row_grad(module.weight, ids)
    layer = getattr(module, "token_adapter", module)  # PEFT's TrainableTokensWrapper
    delta = getattr(layer, "trainable_tokens_delta", None)
    if delta is None or getattr(layer, "merged", False) or len(layer.active_adapters) != 1:
        return None
    name = layer.active_adapters[0]
    if name not in delta:
        return None
    trained = {int(t): k for k, t in enumerate(layer.token_indices[name])}
    where = np.array([trained.get(int(i), -1) for i in ids], dtype=np.int64)
    rows = _row_grad(delta[name], np.maximum(where, 0))
    if rows is None:
        return None
    rows[where < 0] = 0.0
    return rows


def gradient_norms(model, ids: np.ndarray) -> dict[str, float | None]:
    """{"input": L2 norm of the new rows' gradient [, "output": the untied head's]}, read
    from the parameters' ``.grad`` (what the optimizer is about to use). None where there
    is no gradient to read: none yet, ZeRO-3 (deepspeed keeps its own), LoRA. Under FSDP2
    a collective."""
    ids = np.asarray(ids, dtype=np.int64)
    emb = model.get_input_embeddings()
    out: dict[str, float | None] = {}
    rows = None if partitioned_embeddings(model) else _embedding_grad(emb, ids)
    out["input"] = None if rows is None else float(np.linalg.norm(rows))
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None and _base_layer(head) is head and _base_layer(emb) is emb:
        if head.weight is not emb.weight and not partitioned_embeddings(model):
            rows = _row_grad(head.weight, ids)
            out["output"] = None if rows is None else float(np.linalg.norm(rows))
    return out
