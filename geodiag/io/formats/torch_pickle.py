"""A ``.bin``/``.pt``/``.pth`` state dict (``torch.save``, ``save_pretrained`` without
safetensors), unpickled by torch with ``weights_only=True`` and nothing else: the format's
cost is the whole pickle loaded. A URL's is not read (it would be fetched whole).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.io.formats.format import Format, one_file
from geodiag.io.formats.tensor_store import checked_rows, digest_text, new_digest
from geodiag.io.sources.layouts import check_not_lfs_pointer

SUFFIXES = (".bin", ".pt", ".pth")
WEIGHTS = "pytorch_model.bin"  # what save_pretrained writes with safe_serialization=False


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


def find(path: Path) -> Path | None:
    """A file named ``*.bin``, ``*.pt`` or ``*.pth``, or a folder's ``pytorch_model.bin``."""
    if path.is_file():
        return path if path.suffix in SUFFIXES else None
    return one_file(path, (WEIGHTS,))


def _open(found: Path, asked: Path) -> TorchStore:
    check_not_lfs_pointer(found)  # a folder's pytorch_model.bin; a file was checked already
    return TorchStore(found)


FORMAT = Format(
    name="torch pickle",
    what="a `torch.save` state dict (`pytorch_model.bin`, `*.bin`, `*.pt`, `*.pth`), through torch's `weights_only=True`",
    find=find,
    open=_open,
    remote=(
        "a PyTorch pickle is not read remotely (it would be fetched whole and unpickled); "
        "download it, or point at the folder's safetensors"
    ),
    files=(r"pytorch_model\.bin",),
    url_suffixes=SUFFIXES,
)
