"""A training run's own ``torch.save`` checkpoint: the model's state dict wrapped with the
run's other state, ``{"model": state_dict, "optimizer": ..., "iter_num": ..., ...}``, as
nanoGPT writes ``out/ckpt.pt`` (and many a training loop after it). ``torch.load`` and a
reader of plain state dicts stop at the wrapper; this one reads the archive without
torch (``geodiag.io.formats.torch_zip``: ``data.pkl`` unpickled with the tensor classes
only, nothing in it run) and each row asked for by byte range.

Recognised by content: a ``torch.save`` archive whose object is a dict with a ``model``
entry that is a state dict (any file name; in a folder, nanoGPT's ``ckpt.pt``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.io.formats.format import Format, head, one_file
from geodiag.io.formats.tensor_store import digest_text, new_digest
from geodiag.io.formats.torch_zip import (
    ROW_DTYPES,
    TENSOR_GLOBALS,
    Archive,
    ReadsRows,
    StoredTensor,
    open_archive,
)
from geodiag.io.sources.byte_ranges import LocalFile, read_rows

KEY = "model"  # where the state dict sits in the checkpoint's dict
WRITER = "a torch.save training checkpoint"
ZIP = b"PK\x03\x04"  # torch.save's archive is a zip
FOLDER_NAMES = ("ckpt.pt",)  # nanoGPT's


@dataclass(frozen=True)
class _Entry:
    tensor: StoredTensor

    @property
    def shape(self) -> tuple[int, ...]:
        return self.tensor.size

    @property
    def dtype(self) -> str:
        return self.tensor.dtype


def _state_dict(archive: Archive) -> dict[str, StoredTensor] | None:
    """The tensors of the archive's ``model`` state dict; None when it holds none."""
    obj = archive.obj
    state = obj.get(KEY) if isinstance(obj, dict) else None
    if not isinstance(state, dict) or not state:
        return None
    tensors = {k: v for k, v in state.items() if isinstance(k, str) and isinstance(v, StoredTensor)}
    return tensors or None


def _archive(path: Path) -> Archive | None:
    """``path``'s archive when it is a ``torch.save`` file this module reads; else None."""
    if head(path, len(ZIP)) != ZIP:
        return None
    try:
        archive = open_archive(LocalFile(path), TENSOR_GLOBALS, WRITER)
    except InputError:  # another zip, or a pickle of other classes: not this format
        return None
    return archive if _state_dict(archive) is not None else None


def find(path: Path) -> Path | None:
    """A file (any name) or a folder's ``ckpt.pt`` that is a wrapped training checkpoint."""
    file = path if path.is_file() else one_file(path, FOLDER_NAMES)
    return file if file is not None and _archive(file) is not None else None


class TrainingCheckpointStore(ReadsRows):
    """The tensors of a training checkpoint's ``model`` state dict, by byte range."""

    def __init__(self, path: Path) -> None:
        archive = _archive(path)
        if archive is None:
            raise InputError(path, f"not {WRITER} with a '{KEY}' state dict")
        self.path = self.folder = path
        self._archive = archive
        self._entries = {k: _Entry(t) for k, t in _state_dict(archive).items()}
        self._digest = new_digest(archive.pickled)
        self.description = f"training checkpoint {path.name} (its '{KEY}' state dict)"

    def file_of(self, name: str) -> Path:
        self._entry(name)
        return self.path

    def _read(self, name: str, rows: np.ndarray) -> tuple[_Entry, np.ndarray]:
        """Stored values of ``rows`` (sorted, unique), ``(len(rows), d)``."""
        e = self._entry(name)
        t = e.tensor
        if len(t.size) != 2 or t.dtype not in ROW_DTYPES:
            raise InputError(
                self.path, f"tensor '{name}' ({t.dtype}, {list(t.size)}) is not a 2-D float"
            )
        dt = np.dtype(ROW_DTYPES[t.dtype])
        begin = self._archive.data_begin(t, f"tensor '{name}'")
        raw = read_rows(LocalFile(self.path), begin, t.size[1] * dt.itemsize, rows)
        self._digest.update(raw.tobytes())
        return e, raw.view(dt).reshape(len(rows), t.size[1])

    def digests(self) -> dict[str, str]:
        return {str(self.path): digest_text(self._digest)}


FORMAT = Format(
    name="training checkpoint",
    what="a `torch.save` dict whose `model` entry is the state dict (nanoGPT's `ckpt.pt`), "
    "read without torch, its pickle restricted to tensors, rows by byte ranges",
    find=find,
    open=lambda found, asked: TrainingCheckpointStore(found),
    remote=(
        "a torch.save training checkpoint is not read by URL (a pickle, read from a local "
        "file only): download it"
    ),
    files=(r"ckpt\.pt",),
)
