"""Where a checkpoint's tensors live: one safetensors file, a sharded set, a torch pickle,
a GGUF file (``geodiag.io.gguf``, imported only when one is opened), a
torch.distributed.checkpoint folder (``geodiag.io.dcp``, likewise) or a DeepSpeed ZeRO
folder (``geodiag.io.zero``, likewise); MLX-quantized
safetensors are read through ``geodiag.io.mlx_quantized``.

All stores answer the same questions (names, shape, dtype, read rows) so the
checkpoint logic above them never cares about the layout. Safetensors stores
read only the bytes asked for; the torch store must load the whole pickle (that is
the format's cost) and is only used when no safetensors exist.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from geodiag.errors import InputError, cannot_read, nested_too_deeply
from geodiag.io.layouts import check_not_lfs_pointer, dcp_weights, unread_layout, zero_weights
from geodiag.io.safetensors import FLOAT_DTYPES, SafetensorsFile
from geodiag.io.tensor_store import TensorStore, checked_rows, digest_text, new_digest


class SafetensorsStore:
    """One file, or shards listed by ``model.safetensors.index.json``; shards open lazily."""

    def __init__(
        self,
        weight_map: dict[str, Path],
        description: str,
        open_file: Callable[[Path], SafetensorsFile] = SafetensorsFile,
    ) -> None:
        """``open_file``: a file of ``weight_map`` opened (a URL's, by ranges: geodiag.io.remote)."""
        self._weight_map = weight_map
        self._open: dict[Path, SafetensorsFile] = {}
        self._open_file = open_file
        self.description = description

    @classmethod
    def single(
        cls,
        path: Path | str,
        open_file: Callable[[Path | str], SafetensorsFile] = SafetensorsFile,
        description: str | None = None,
    ) -> SafetensorsStore:
        """The store of one file (``open_file``: a URL's, by ranges), its header read once."""
        f = open_file(path)
        store = cls(
            {name: f.path for name in f.keys()},
            description or f"safetensors file {Path(path).name}",
            open_file,
        )
        store._open[f.path] = f
        return store

    @classmethod
    def sharded(cls, index_path: Path) -> SafetensorsStore:
        shards = shard_names(index_path)
        files = {name: index_path.parent / shard for name, shard in shards.items()}
        for shard in sorted(set(files.values())):
            if not shard.is_file():
                raise InputError(index_path, f"names shard '{shard.name}', which is missing")
        return cls(files, sharded_description(shards, index_path.name))

    def _file(self, name: str) -> SafetensorsFile:
        path = self.file_of(name)
        if path not in self._open:
            self._open[path] = self._open_file(path)
        f = self._open[path]
        if name not in f.tensors:
            raise InputError(
                path, f"shard index says tensor '{name}' is here, but the file lacks it"
            )
        return f

    def names(self) -> list[str]:
        return list(self._weight_map)

    def file_of(self, name: str) -> Path:
        try:
            return self._weight_map[name]
        except KeyError:
            raise InputError(self.description, f"no tensor named '{name}'") from None

    def shape(self, name: str) -> tuple[int, ...]:
        return self._file(name).info(name).shape

    def dtype(self, name: str) -> str:
        return self._file(name).info(name).dtype

    def read_rows(self, name: str, rows: np.ndarray, float32: bool = False) -> np.ndarray:
        return self._file(name).read_rows(name, rows, float32)

    def read_block(self, name: str, start: int, stop: int, float32: bool = False) -> np.ndarray:
        return self._file(name).read_block(name, start, stop, float32)

    def read_words(self, name: str, rows: np.ndarray) -> np.ndarray:
        """A U32 tensor's rows as stored: the packed words ``geodiag.io.mlx_quantized`` reads."""
        return self._file(name).read_words(name, rows)

    def digests(self) -> dict[str, str]:
        return {str(p): digest_text(f.digest) for p, f in self._open.items()}


def shard_names(index_path: Path) -> dict[str, str]:
    """Tensor name -> shard file name, from a ``model.safetensors.index.json``."""
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
        weight_map = index["weight_map"]
        if not isinstance(weight_map, dict):
            raise TypeError
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
        raise InputError(
            index_path, "not a valid shard index (needs a 'weight_map' object)"
        ) from None
    except RecursionError:
        raise nested_too_deeply(index_path) from None
    except OSError as e:
        raise cannot_read(index_path, e) from None
    return {name: str(shard) for name, shard in weight_map.items()}


def sharded_description(shards: dict[str, str], index_name: str) -> str:
    return f"sharded safetensors ({len(set(shards.values()))} shards, {index_name})"


class TorchStore:
    """A ``.bin``/``.pt`` state dict, unpickled with ``weights_only=True`` and nothing else."""

    def __init__(self, path: Path) -> None:
        try:
            import torch
        except ImportError:
            raise InputError(
                path, "reading a PyTorch pickle needs torch; install it or convert to safetensors"
            ) from None
        self.path = path
        self.description = f"torch state dict {path.name}"
        try:
            obj = torch.load(path, map_location="cpu", weights_only=True, mmap=False)
        except Exception as e:  # UnpicklingError, EOFError, RuntimeError (zip), ...
            msg = str(e).splitlines()[0] if str(e) else e.__class__.__name__
            if "weights_only" in str(e) or "Unsupported global" in str(e):
                raise InputError(
                    path,
                    "refused: the pickle needs arbitrary code to load (not a plain state dict); "
                    "only weights_only=True pickles are read",
                ) from None
            raise InputError(
                path, f"cannot read torch file ({e.__class__.__name__}: {msg[:200]})"
            ) from None
        if isinstance(obj, dict) and "state_dict" in obj and isinstance(obj["state_dict"], dict):
            obj = obj["state_dict"]
        if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
            raise InputError(path, "not a state dict (expected a mapping of names to tensors)")
        self._tensors = obj
        self._digest = digest_text(new_digest(path.read_bytes()))
        self._torch = torch

    def names(self) -> list[str]:
        return list(self._tensors)

    def file_of(self, name: str) -> Path:
        return self.path

    def _get(self, name: str):
        try:
            return self._tensors[name]
        except KeyError:
            raise InputError(self.path, f"no tensor named '{name}'") from None

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._get(name).shape)

    def dtype(self, name: str) -> str:
        t = self._get(name)
        return {
            self._torch.float32: "F32",
            self._torch.float16: "F16",
            self._torch.bfloat16: "BF16",
            self._torch.float64: "F64",
            self._torch.float8_e4m3fn: "F8_E4M3",  # torch converts these itself
            self._torch.float8_e5m2: "F8_E5M2",
        }.get(t.dtype, str(t.dtype))

    def read_rows(self, name: str, rows: np.ndarray, float32: bool = False) -> np.ndarray:
        t = self._get(name)
        rows = checked_rows(rows, t.shape[0], self.path, name)
        exact32 = float32 and t.dtype != self._torch.float64
        dtype = self._torch.float32 if exact32 else self._torch.float64
        return t[self._torch.from_numpy(rows)].to(dtype).numpy()

    def read_block(self, name: str, start: int, stop: int, float32: bool = False) -> np.ndarray:
        t = self._get(name)[start:stop]
        exact32 = float32 and t.dtype != self._torch.float64
        return t.to(self._torch.float32 if exact32 else self._torch.float64).numpy()

    def digests(self) -> dict[str, str]:
        return {str(self.path): self._digest}


def open_store(path: str | os.PathLike[str]) -> TensorStore:
    """Open the tensors of a checkpoint folder or a lone weights file."""
    store = _open_store(Path(path))
    if isinstance(store, SafetensorsStore):
        from geodiag.io.mlx_quantized import dequantizing  # MLX's packed matrices, if any

        return dequantizing(store, Path(path))
    return store


def _open_store(p: Path) -> TensorStore:
    try:
        p.stat()
    except FileNotFoundError:
        raise InputError(p, "no such file or folder") from None
    except OSError as e:  # a symlink loop, a name too long, no permission
        raise cannot_read(p, e) from None
    if p.is_file():
        check_not_lfs_pointer(p)
        if p.suffix == ".safetensors":
            return SafetensorsStore.single(p)
        if p.suffix in (".bin", ".pt", ".pth"):
            return TorchStore(p)
        if p.suffix == ".gguf":
            from geodiag.io.gguf import GGUFStore  # llama.cpp's gguf package, only here

            return GGUFStore(p)
        raise InputError(
            p, "unknown weights format (expected .safetensors, .bin, .pt, .gguf or a folder)"
        )
    for index in ("model.safetensors.index.json",):
        if (p / index).is_file():
            return SafetensorsStore.sharded(p / index)
    if (p / "model.safetensors").is_file():
        return SafetensorsStore.single(p / "model.safetensors")
    singles = sorted(p.glob("*.safetensors"))
    singles = [s for s in singles if s.name != "codebooks.safetensors"]
    if len(singles) == 1:
        return SafetensorsStore.single(singles[0])
    if (p / "pytorch_model.bin").is_file():
        check_not_lfs_pointer(p / "pytorch_model.bin")
        return TorchStore(p / "pytorch_model.bin")
    if (dcp := dcp_weights(p)) is not None:
        from geodiag.io.dcp import DCPStore

        return DCPStore(dcp)
    if (zero := zero_weights(p)) is not None:
        from geodiag.io.zero import ZeroStore

        return ZeroStore(zero)
    if (what := unread_layout(p)) is not None:
        raise InputError(p, what)
    raise InputError(
        p, "no model weights found (model.safetensors, its index, or pytorch_model.bin)"
    )


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES
