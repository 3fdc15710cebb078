"""A PEFT adapter folder read over its base checkpoint, rows rebuilt as PEFT merges them.

An adapter folder holds ``adapter_config.json`` and ``adapter_model.safetensors`` (or
``adapter_model.bin``). What it can change in an embedding matrix ``E`` (V, d), with
``module`` the embedding's module path (``model.embed_tokens``):

- ``modules_to_save``: the whole trained matrix, key ``{module}.weight``;
- the resized base matrix (``save_embedding_layers``), key ``{module}.base_layer.weight``
  (``{module}.token_adapter.base_layer.weight`` under a LoRA config's trainable tokens);
- LoRA on the embedding, ``{module}.lora_embedding_A`` (r, V) and ``...B`` (d, r):
  ``E + (B @ A).T * scaling``, scaling = alpha / r (alpha / sqrt(r) with ``use_rslora``),
  r and alpha per module from ``rank_pattern`` / ``alpha_pattern``;
- trainable tokens, ``{module}.token_adapter.trainable_tokens_delta`` under a LoRA
  config's ``trainable_token_indices``, ``{module}.trainable_tokens_delta`` in a
  ``TRAINABLE_TOKENS`` adapter (n, d): the new *values* of the indexed rows (in the
  order of the index list), copied over ``E`` on merge.

Keys carry PEFT's ``base_model.model.`` prefix; the adapter name is already stripped
on save. :class:`AdapterStore` answers the :class:`~geodiag.io.formats.tensor_store.TensorStore`
questions for the *effective* matrices, reading only the rows asked for from the base
and the adapter (the LoRA factor ``A`` is read whole: r x V values, ~1% of ``E`` at
r = 8), so everything above it (new rows, vocabulary sample, neighbour scan) works
unchanged. No torch: safetensors files go through geodiag's own reader.

Its before (:func:`before`): the same effective matrices as they were when training
began, the reference the new rows' movement is measured from
(:mod:`geodiag.io.vocabulary.references`): a ``modules_to_save`` copy's ``original_module.weight``,
saved beside it (PEFT 0.17 and later, when the embedding was resized in memory), else the
base's tensor of the same shape; under trainable tokens or LoRA, the rows without them
(``trainable_tokens_delta`` starts as a copy of those rows, ``lora_embedding_B`` at zero).

A remote adapter folder (``geodiag.io.sources.remote``) is read the same way: its config fetched,
its ``adapter_model.safetensors`` by ranges, and its base from ``--base`` or
``base_model_name_or_path``, each a local folder or a URL (a Hub id is neither: it is
named, with the ``--base hf://ORG/NAME`` that reads it).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.io.formats.format import Format, RemoteCheckpoint, SmallFiles
from geodiag.io.formats.store import SafetensorsStore, opened_by_ranges
from geodiag.io.formats.tensor_names import ORIGINAL_SUFFIX, OUTPUT_HEAD_NAMES, PEFT_PREFIX
from geodiag.io.formats.tensor_store import TensorStore
from geodiag.io.formats.torch_pickle import TorchStore
from geodiag.io.sources.layouts import ADAPTER_CONFIG, ADAPTER_WEIGHTS, check_not_lfs_pointer
from geodiag.io.sources.remote import is_remote
from geodiag.jsonio import read_json_object

CONFIG_FILENAME = ADAPTER_CONFIG
WEIGHT_FILENAMES = ADAPTER_WEIGHTS


def is_adapter(path: Path) -> bool:
    return Path(path).is_dir() and (path / CONFIG_FILENAME).is_file()


@dataclass
class ModulePatch:
    """Everything an adapter changes in one base tensor ``{module}.weight``."""

    module: str
    full: str | None = None  # adapter key of a whole replacement matrix
    full_kind: str | None = None  # "modules_to_save" | "base_layer"
    lora_a: str | None = None
    lora_b: str | None = None
    scaling: float | None = None
    rank: int | None = None
    token_key: str | None = None  # adapter key of trainable_tokens_delta
    token_indices: np.ndarray | None = None  # (n,) int64, row order of the delta

    def kinds(self) -> list[str]:
        out = [self.full_kind] if self.full else []
        out += ["lora"] if self.lora_a else []
        out += ["trainable tokens"] if self.token_key else []
        return out


@dataclass
class AdapterInfo:
    path: Path
    config_path: Path | str  # as shown: a remote adapter's URL
    weights_path: Path | str
    peft_type: str
    base_path: Path | str  # a local folder or file, or a URL
    base_source: str  # "--base" | "adapter_config.json"
    patches: dict[str, ModulePatch]  # base tensor name -> patch
    base_root: Path | None = None  # the folder of the base's config and tokenizer
    config: dict = field(default_factory=dict)  # adapter_config.json, as read
    where: str | None = None  # a remote adapter's URL, as shown (``path`` holds its config)
    trainable_token_ids: np.ndarray | None = None  # the input embedding's trainable rows
    notes: list[str] = field(default_factory=list)

    def provenance(self) -> dict:
        return {
            "peft_type": self.peft_type,
            "adapter": self.where or str(self.path),
            "base": str(self.base_path),
            "base_from": self.base_source,
            "embedding_changes": {
                name: ", ".join(p.kinds()) for name, p in self.patches.items() if p.kinds()
            },
        }


def resolve_base(
    adapter: Path | str, config: dict, base: Path | str | None, remote: bool = False
) -> tuple[Path | str, str]:
    """The base checkpoint: ``--base``, else ``base_model_name_or_path`` when it is a local
    folder or a URL (``adapter``: the config as shown; ``remote``: the adapter is read by
    URL, so a Hub id is named with its ``hf://`` form)."""
    if base is not None:
        if is_remote(base):
            return base, "--base"
        if not Path(base).exists():
            raise InputError("--base", f"{base}: no such file or folder")
        return Path(base), "--base"
    name = config.get("base_model_name_or_path")
    if isinstance(name, str) and is_remote(name):
        return name, "adapter_config.json"
    if isinstance(name, str) and name and Path(name).is_dir():
        return Path(name), "adapter_config.json"
    shown = repr(name) if name else "nothing"
    hub = isinstance(name, str) and name.count("/") == 1 and not Path(name).is_absolute()
    hint = f" (for a Hub id, --base hf://{name})" if hub else ""
    raise InputError(
        adapter,
        f"base_model_name_or_path is {shown}, not a local folder{' here' if remote else ''} "
        f"nor a URL; pass the base checkpoint with --base PATH or URL{hint} (a "
        "save_pretrained folder; geodiag downloads nothing)",
    )


# The base's tensors and the folder of its config and tokenizer, from the base as
# resolve_base names it and where it came from (geodiag.io.formats.registry.open_base).
OpenBase = Callable[[Path | str, str], tuple[TensorStore, Path]]


def _weights_file(weights: Path) -> TensorStore:
    """The adapter's own weights file: ``adapter_model.safetensors``, else its ``.bin``."""
    check_not_lfs_pointer(weights)
    if weights.suffix == ".safetensors":
        return SafetensorsStore.single(weights)
    return TorchStore(weights)


def _pattern_value(patterns: object, module: str, default):
    """PEFT's rule: the first pattern key matching the end of the module name wins."""
    if not isinstance(patterns, dict):
        return default
    for key, value in patterns.items():
        if re.match(rf"(.*\.)?({key})$", module):
            return value
    return default


def _token_indices(config: dict, module: str, where: Path) -> list[int] | None:
    """Trainable-token indices of ``module`` from a LoRA or TRAINABLE_TOKENS config."""
    if str(config.get("peft_type", "")).upper() == "TRAINABLE_TOKENS":
        # One index list for the targeted embedding and the tied head's copy PEFT saves.
        spec = config.get("token_indices")
    else:
        spec = config.get("trainable_token_indices")
        if isinstance(spec, list):
            spec = {"embed_tokens": spec}  # a list targets the input embedding
        if isinstance(spec, dict):
            spec = _pattern_value(spec, module, None)
    if spec is None:
        return None
    if not isinstance(spec, list) or not all(isinstance(i, int) for i in spec):
        raise InputError(where, f"token indices of '{module}' must be a list of ints, got {spec!r}")
    return spec


def _parse_key(key: str) -> tuple[str, str] | None:
    """(module, kind) of an adapter key that touches an embedding, else None."""
    k = key.removeprefix(PEFT_PREFIX)
    for suffix, kind in (
        (".token_adapter.trainable_tokens_delta", "tokens"),  # under a LoRA config
        (".token_adapter.base_layer.weight", "base_layer"),  # its resized base, same wrapper
        (".trainable_tokens_delta", "tokens"),  # a TRAINABLE_TOKENS adapter
        (".lora_embedding_A", "lora_a"),
        (".lora_embedding_B", "lora_b"),
        (".base_layer.weight", "base_layer"),
        (".weight", "weight"),
    ):
        for s in (suffix, suffix + ".weight") if kind.startswith("lora") else (suffix,):
            if k.endswith(s):
                return k[: -len(s)], kind
    return None


def open_adapter(
    path: Path,
    base: Path | str | None,
    open_base: OpenBase,
    remote: RemoteCheckpoint | None = None,
) -> tuple[AdapterInfo, TensorStore]:
    """Parse the adapter, open its base (``open_base``: the registry's opener), and return
    the store of effective tensors. ``remote``: the adapter read by URL (``path`` then
    holds its fetched config)."""
    config = read_json_object(path / CONFIG_FILENAME)
    if remote is not None:
        config_path: Path | str = remote.shown(CONFIG_FILENAME)
        weights: Path | str | None = remote.shown(WEIGHT_FILENAMES[0])
        adapter_store = remote.adapter_weights
    else:
        config_path = path / CONFIG_FILENAME
        weights = next((path / n for n in WEIGHT_FILENAMES if (path / n).is_file()), None)
        if weights is None:
            raise InputError(
                path,
                f"{CONFIG_FILENAME} but no {' or '.join(WEIGHT_FILENAMES)}: adapter weights missing",
            )
        adapter_store = None
    peft_type = str(config.get("peft_type", "")).upper()
    if peft_type not in ("LORA", "TRAINABLE_TOKENS"):
        raise InputError(
            config_path,
            f"peft_type {config.get('peft_type')!r}: only LORA and TRAINABLE_TOKENS adapters "
            "change embedding rows in a way geodiag rebuilds",
        )
    base_path, base_source = resolve_base(config_path, config, base, remote is not None)
    base_store, base_root = open_base(base_path, base_source)
    adapter_store = adapter_store or _weights_file(weights)
    base_names = set(base_store.names())
    saved = config.get("modules_to_save") or []
    saved = [saved] if isinstance(saved, str) else saved

    patches: dict[str, ModulePatch] = {}
    notes: list[str] = []
    tied_heads: list[str] = []  # heads whose trainable tokens are taken as the embedding's
    for key in adapter_store.names():
        parsed = _parse_key(key)
        if parsed is None:
            continue
        module, kind = parsed
        tensor = f"{module}.weight"
        if tensor not in base_names:
            if kind == "weight" and any(re.match(rf"(.*\.)?({m})$", module) for m in saved):
                pass  # a modules_to_save copy of a head the (tied) base does not store
            elif kind == "weight":
                continue  # a bias or another module's weight, e.g. a LoRA factor of a Linear
            elif kind in ("tokens", "base_layer") and tensor in OUTPUT_HEAD_NAMES:
                # PEFT saves the tied head's copy of the embedding's changes; the base
                # stores no head, so it is tied and merges to the same rows.
                note = f"'{module}' is tied to the embedding: its copy in the adapter is not read"
                notes += [] if note in notes else [note]
                tied_heads += [module] if kind == "tokens" else []
                continue
            else:
                raise InputError(
                    weights,
                    f"adapter changes '{module}', but the base {base_path} has no tensor '{tensor}'",
                )
        shape = base_store.shape(tensor) if tensor in base_names else adapter_store.shape(key)
        if kind == "weight" and len(shape) != 2:
            continue  # modules_to_save of a norm or a bias: not a token table
        p = patches.setdefault(tensor, ModulePatch(module))
        if kind in ("weight", "base_layer"):
            p.full, p.full_kind = key, "modules_to_save" if kind == "weight" else "base_layer"
        elif kind == "lora_a":
            p.lora_a = key
        elif kind == "lora_b":
            p.lora_b = key
        else:
            p.token_key = key

    for tensor, p in patches.items():
        _check_patch(tensor, p, config, config_path, weights, base_store, adapter_store)
    _check_tied_heads(tied_heads, patches, config, config_path)
    info = AdapterInfo(
        path, config_path, weights, peft_type, base_path, base_source, patches, base_root, config
    )
    info.notes = notes
    info.where = remote.where if remote is not None else None
    if config.get("use_dora") and any(p.lora_a for p in patches.values()):
        raise InputError(config_path, "DoRA on an embedding (use_dora) is not rebuilt by geodiag")
    return info, AdapterStore(base_store, adapter_store, patches, info)


def _check_patch(tensor, p: ModulePatch, config, config_path, weights, base, adapter) -> None:
    """Shapes of the adapter's tensors against the config and the base; exit 2 on mismatch."""
    in_base = tensor in base.names()
    d = base.shape(tensor)[1] if in_base else adapter.shape(p.full)[-1]
    n_base = base.shape(tensor)[0] if in_base else 0
    n_rows = n_base
    if p.full is not None:
        shape = adapter.shape(p.full)
        if len(shape) != 2 or shape[1] != d:
            raise InputError(
                weights,
                f"'{p.full}' has shape {list(shape)}, but the base's '{tensor}' has hidden size {d}",
            )
        n_rows = shape[0]
    if (p.lora_a is None) != (p.lora_b is None):
        raise InputError(weights, f"LoRA on '{p.module}' needs both lora_embedding_A and _B")
    if p.lora_a is not None:
        a, b = adapter.shape(p.lora_a), adapter.shape(p.lora_b)
        if len(a) != 2 or len(b) != 2 or a[0] != b[1]:
            raise InputError(
                weights, f"LoRA factors of '{p.module}' do not pair: A {list(a)}, B {list(b)}"
            )
        if b[0] != d:
            raise InputError(
                weights,
                f"lora_embedding_B of '{p.module}' is {list(b)}, but the base's '{tensor}' has "
                f"hidden size {d}: adapter trained on another base?",
            )
        if a[1] != n_rows:
            raise InputError(
                weights,
                f"lora_embedding_A of '{p.module}' covers {a[1]} rows, but the embedding has "
                f"{n_rows}: adapter trained on a resized base; pass that base with --base",
            )
        r = _pattern_value(config.get("rank_pattern"), p.module, config.get("r", 8))
        alpha = _pattern_value(config.get("alpha_pattern"), p.module, config.get("lora_alpha", 8))
        if r != a[0]:
            raise InputError(
                config_path,
                f"config says rank {r} for '{p.module}' (r / rank_pattern), weights have {a[0]}",
            )
        p.rank = int(r)
        p.scaling = alpha / math.sqrt(r) if config.get("use_rslora") else alpha / r
    if p.token_key is not None:
        indices = _token_indices(config, p.module, config_path)
        shape = adapter.shape(p.token_key)
        if indices is None:
            raise InputError(
                config_path,
                f"weights hold trainable tokens for '{p.module}' but the config lists no indices for it",
            )
        if len(shape) != 2 or shape != (len(indices), d):
            raise InputError(
                weights,
                f"trainable_tokens_delta of '{p.module}' is {list(shape)}, the config lists "
                f"{len(indices)} token indices and the base's hidden size is {d}",
            )
        ids = np.asarray(indices, dtype=np.int64)
        limit = n_rows if p.full is not None else max(n_base, int(ids.max()) + 1)
        bad = ids[(ids < 0) | (ids >= limit)]
        if bad.size:
            raise InputError(
                config_path, f"token indices {bad[:5].tolist()} of '{p.module}' out of range"
            )
        missing = np.setdiff1d(np.arange(n_base, limit), ids)
        if missing.size:
            raise InputError(
                config_path,
                f"token index {int(ids.max())} of '{p.module}' is past the base's {n_base} rows, "
                f"and rows {missing[:5].tolist()}{', ...' if missing.size > 5 else ''} are in "
                "neither the base nor the adapter: new tokens left out of "
                "trainable_token_indices, which then have no trained row anywhere (list every "
                "new token), or a base other than the resized one the adapter was trained over "
                "(pass that with --base)",
            )
        p.token_indices = ids
    elif p.full is None and p.lora_a is None:
        return


def _check_tied_heads(heads: list[str], patches, config: dict, config_path: Path) -> None:
    """A tied head's token adapter is read as the embedding's only when it trains the same
    indices: PEFT then ties it to the embedding's delta. Given other indices in
    ``trainable_token_indices`` it trains its own delta, and merging writes both deltas into
    the one shared matrix, in an order geodiag does not rebuild."""
    embedding = [p.token_indices.tolist() for p in patches.values() if p.token_indices is not None]
    for head in heads:
        own = _token_indices(config, head, config_path)
        if own is not None and own not in embedding:
            shown = f"{own[:5]}{'...' if len(own) > 5 else ''}"
            raise InputError(
                config_path,
                f"trainable_token_indices gives the tied head '{head}' its own indices "
                f"{shown}, not the embedding's: PEFT merges both into the one shared matrix, "
                "which geodiag does not rebuild; train the same indices, or untie the head",
            )


class AdapterStore:
    """The base's tensors, with the adapter's changes applied to the rows read."""

    def __init__(self, base: TensorStore, adapter: TensorStore, patches, info) -> None:
        self.base, self.adapter, self.patches, self.info = base, adapter, patches, info
        self.description = f"PEFT adapter {info.path.name} over {base.description}"
        self._a: dict[str, np.ndarray] = {}  # (V, r) LoRA A transposed, read once
        self._b: dict[str, np.ndarray] = {}  # (r, d) LoRA B transposed, times scaling
        self._token_pos: dict[str, dict[int, int]] = {}

    def names(self) -> list[str]:
        extra = [n for n in self.patches if n not in set(self.base.names())]
        return [*self.base.names(), *extra]

    def _source(self, name: str) -> tuple[TensorStore, str]:
        p = self.patches.get(name)
        if p is not None and p.full is not None:
            return self.adapter, p.full
        return self.base, name

    def shape(self, name: str) -> tuple[int, ...]:
        p = self.patches.get(name)
        store, key = self._source(name)
        shape = store.shape(key)
        if p is not None and p.full is None and p.token_indices is not None:
            return (max(shape[0], int(p.token_indices.max()) + 1), *shape[1:])
        return shape

    def dtype(self, name: str) -> str:
        store, key = self._source(name)
        return store.dtype(key)

    def file_of(self, name: str) -> Path:
        p = self.patches.get(name)
        return self.info.weights_path if p is not None and p.kinds() else self.base.file_of(name)

    def _lora(self, name: str, p: ModulePatch) -> tuple[np.ndarray, np.ndarray]:
        if name not in self._a:
            self._a[name] = np.ascontiguousarray(
                self.adapter.read_rows(p.lora_a, np.arange(p.rank)).T
            )
            b = self.adapter.read_rows(p.lora_b, np.arange(self.base.shape(name)[1]))  # (d, r)
            self._b[name] = np.ascontiguousarray(b.T) * p.scaling  # (r, d)
        return self._a[name], self._b[name]

    def _positions(self, name: str, p: ModulePatch) -> dict[int, int]:
        if name not in self._token_pos:
            # The last occurrence wins, as with index_copy over a repeated index.
            self._token_pos[name] = {int(i): k for k, i in enumerate(p.token_indices)}
        return self._token_pos[name]

    def _base_rows(self, name: str, rows: np.ndarray) -> np.ndarray:
        store, key = self._source(name)
        n_stored = store.shape(key)[0]
        if rows.size and rows.max() >= n_stored:  # rows only the trainable tokens define
            out = np.zeros((len(rows), store.shape(key)[1]))
            inside = rows < n_stored
            out[inside] = store.read_rows(key, rows[inside])
            return out
        return store.read_rows(key, rows)

    def read_rows(self, name: str, rows: np.ndarray, float32: bool = False) -> np.ndarray:
        """float64 for patched tensors (a LoRA delta is not exact in float32), whatever
        ``float32`` says; the base's own tensors as the base store reads them."""
        rows = np.asarray(rows, dtype=np.int64)
        p = self.patches.get(name)
        if p is None:
            return self.base.read_rows(name, rows, float32)
        n = self.shape(name)[0]
        if rows.size and (rows.min() < 0 or rows.max() >= n):
            raise InputError(self.file_of(name), f"row ids out of range for '{name}' with {n} rows")
        out = self._base_rows(name, rows)  # (m, d) float64
        if p.lora_a is not None:
            a_t, b_t = self._lora(name, p)
            out += a_t[rows] @ b_t  # (m, r) @ (r, d): row i gets scaling * B @ A[:, i]
        if p.token_key is not None:
            pos = self._positions(name, p)
            hit = [(j, pos[int(i)]) for j, i in enumerate(rows) if int(i) in pos]
            if hit:
                dst, src = (np.array(v, dtype=np.int64) for v in zip(*hit, strict=True))
                order = np.argsort(src)
                values = self.adapter.read_rows(p.token_key, src[order])
                out[dst[order]] = values
        return out

    def read_block(self, name: str, start: int, stop: int, float32: bool = False) -> np.ndarray:
        """float64 always: a LoRA delta added to float32 rows is no longer exact in float32."""
        return self.read_rows(name, np.arange(start, min(stop, self.shape(name)[0])))

    def digests(self) -> dict[str, str]:
        return {**self.base.digests(), **self.adapter.digests()}


def before(store: AdapterStore) -> tuple[AdapterStore, dict[str, tuple[str, str]]]:
    """(the effective tensors as they were when training began, {tensor: (where its before
    is, in short; what it is)}) for each patched tensor the files carry a before of (module
    docstring); a tensor without one is left out of the dict (reading it reads the base's)."""
    base_names = set(store.base.names())
    weights, base = store.info.weights_path, store.info.base_path
    patches: dict[str, ModulePatch] = {}
    what: dict[str, tuple[str, str]] = {}
    for tensor, p in store.patches.items():
        if p.full_kind == "modules_to_save":
            original = _original_key(p, store.adapter)
            if original is not None:
                patches[tensor] = ModulePatch(p.module, original, "original_module")
                what[tensor] = (
                    f"original_module in {weights}",
                    f"'{original}' (PEFT's copy of the module before training)",
                )
            elif tensor in base_names and store.base.shape(tensor) == store.shape(tensor):
                patches[tensor] = ModulePatch(p.module)
                what[tensor] = (
                    f"the base {base}",
                    f"the base's '{tensor}' (the modules_to_save copy starts as it)",
                )
            continue
        if not (p.token_key or p.lora_a):
            continue  # a resized base alone: nothing trained
        kept = ModulePatch(p.module, p.full, p.full_kind)  # a resized base is the before
        kept_rows = store.adapter.shape(p.full)[0] if p.full else store.base.shape(tensor)[0]
        if kept_rows < store.shape(tensor)[0]:
            continue  # rows only the trainable tokens define: no before
        patches[tensor] = kept
        source = (
            (f"{p.full_kind} in {weights}", f"'{p.full}'")
            if p.full
            else (
                f"the base {base}",
                f"the base's '{tensor}'",
            )
        )
        changes = " and ".join(k for k in ("trainable tokens", "lora") if k in p.kinds())
        what[tensor] = (source[0], f"{source[1]} without the adapter's {changes}")
    return AdapterStore(store.base, store.adapter, patches, store.info), what


def _original_key(p: ModulePatch, adapter: TensorStore) -> str | None:
    """The adapter's ``original_module.weight`` beside the ``modules_to_save`` copy ``p``,
    when saved and of the copy's shape."""
    key = f"{PEFT_PREFIX}{p.module}{ORIGINAL_SUFFIX}"
    if key not in set(adapter.names()) or adapter.shape(key) != adapter.shape(p.full):
        return None
    return key


def url(remote, name: str | None, small: SmallFiles) -> RemoteCheckpoint | None:
    """A URL folder with ``adapter_config.json``: the config fetched, the adapter's
    ``adapter_model.safetensors`` by ranges (its ``.bin`` is a pickle, read only
    locally); its base is opened by :func:`open_adapter`."""
    if name is not None:
        return None
    folder = small.folder()
    if not remote.exists(ADAPTER_CONFIG):
        return None
    (folder / ADAPTER_CONFIG).write_bytes(remote.fetch(ADAPTER_CONFIG))
    safetensors, pickle = ADAPTER_WEIGHTS
    if not remote.exists(safetensors, required=True):
        found = f"only {pickle}, a pickle read only locally" if remote.exists(pickle) else "none"
        raise InputError(
            remote.where,
            f"a PEFT adapter folder ({ADAPTER_CONFIG}) without {safetensors} ({found}): "
            "remotely adapters are read from safetensors; download the folder",
        )
    weights = SafetensorsStore.single(
        remote.shown(safetensors), opened_by_ranges(remote), f"adapter {safetensors}"
    )
    return RemoteCheckpoint(folder, None, remote.where, [folder], weights)


FORMAT = Format(
    name="PEFT adapter",
    what="a PEFT adapter folder (`adapter_config.json`, `adapter_model.safetensors` or "
    "`.bin`): LoRA and trainable tokens, read over its base as PEFT merges them",
    find=lambda path: path if is_adapter(path) else None,
    over_base=True,
    url=url,
    files=(r"adapter_model\.safetensors", r"adapter_config\.json"),
)
