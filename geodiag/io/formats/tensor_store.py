"""The questions every store of tensors answers (:class:`TensorStore`): names, shape,
dtype, the file that holds a tensor, rows by index or by block, digests. The stores are
the format modules' (``geodiag.io.formats``: safetensors in ``store``, ``gguf``,
``torch_pickle``, ``torch_training``, ``dcp``, ``zero``, ``mlx_quantized``), the arrays,
tensors and models of ``memory`` and the merged rows of ``peft_adapter``; everything
above them asks only these questions."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np
import xxhash

from geodiag.errors import InputError

# The digest of the bytes a store reads, per file, as the reports give it
# ("ALGORITHM:hex"): xxh3-128 (xxHash), not a cryptographic hash. It says which bytes were
# measured; it guards against no adversary, and no report promised more. Speed decided: on
# the gate's Qwen-sized run (bench/check_speed.py) every original row is read once, 614 MB,
# and sha256 (SHA-NI, 1.7 GB/s on AMD EPYC) cost ~0.36 s of it, blake2b 0.75 s, blake3
# 0.15 s, xxh3-128 ~0.01 s (~50 GB/s).
DIGEST_ALGORITHM = "xxh3_128"


def new_digest(data: bytes | memoryview = b""):
    """A running digest of the bytes read (``update``; ``hexdigest``), DIGEST_ALGORITHM's."""
    return xxhash.xxh3_128(data)


def digest_text(digest) -> str:
    """A digest as the reports give it: ``xxh3_128:<32 hex digits>``."""
    return f"{DIGEST_ALGORITHM}:{digest.hexdigest()}"


class TensorStore(Protocol):
    description: str

    def names(self) -> list[str]: ...
    def shape(self, name: str) -> tuple[int, ...]: ...
    def dtype(self, name: str) -> str: ...
    def file_of(self, name: str) -> Path: ...
    # float32=True permits float32 where it holds the stored values exactly (F32, F16, BF16,
    # FP8, GGUF's dequantized rows); a store whose rows are computed (a merged LoRA delta)
    # or stored as F64 returns float64 anyway, so callers take either.
    def read_rows(self, name: str, rows: np.ndarray, float32: bool = False) -> np.ndarray: ...
    def read_block(self, name: str, start: int, stop: int, float32: bool = False) -> np.ndarray: ...
    def digests(self) -> dict[str, str]: ...


class PackedSource(TensorStore, Protocol):
    """A store that also hands out a packed tensor's raw 32-bit words
    (``SafetensorsStore``; what :mod:`geodiag.io.formats.mlx_quantized` dequantizes)."""

    def read_words(self, name: str, rows: np.ndarray) -> np.ndarray: ...


def checked_rows(rows: np.ndarray, n_rows: int, where: object, name: str) -> np.ndarray:
    """``rows`` as int64 when each lies in ``[0, n_rows)``: every store's row ids are checked
    here; else an InputError naming ``where``, the tensor and the first five ids outside."""
    rows = np.asarray(rows, dtype=np.int64)
    if rows.size and (rows.min() < 0 or rows.max() >= n_rows):
        bad = rows[(rows < 0) | (rows >= n_rows)][:5].tolist()
        raise InputError(
            where, f"row ids {bad} out of range for tensor '{name}' with {n_rows} rows"
        )
    return rows
