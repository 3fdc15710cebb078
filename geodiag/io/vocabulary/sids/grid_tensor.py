"""GRID's ``merged_predictions_tensor.pt``: ``torch.save`` of one int64 tensor, the items'
codes after its post-processing (a de-duplication column appended, then transposed):
shape ``(levels + 1, items)``, the last row the de-duplication digit (0 for an item alone,
1..N within a group sharing the other digits). Without that post-processing its default
writer (``merge_list_of_keyed_tensors_to_single_tensor``, into ``torch.zeros``) saves
float32 ``(items, levels)``: integer-valued floats, read as those integers (a value that is
not one is refused naming it). Read without torch (``torch_zip``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.io.formats.torch_zip import TENSOR_GLOBALS, StoredTensor, open_archive
from geodiag.io.sources.byte_ranges import LocalFile
from geodiag.io.vocabulary.sids.base import Dialect, SidMap, codes_matrix, register_map

FRAMEWORK = "GRID"
ZIP_MAGIC = b"PK\x03\x04"


def sniff(path: Path, head: bytes) -> bool:
    """A torch.save archive holding one integer tensor."""
    if not head.startswith(ZIP_MAGIC) or b"data.pkl" not in head:
        return False
    try:
        obj = open_archive(LocalFile(path), TENSOR_GLOBALS, "torch.save").obj
    except InputError:
        return False
    return isinstance(obj, StoredTensor) and obj.dtype.startswith(
        ("I", "U", "F")
    )  # BF16 is read as raw bits: no


def _integers(path: Path, values: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Codes as int64, and what was detected: a float tensor's values must all be integers
    (GRID's default writer stores codes in a float32 tensor)."""
    if np.issubdtype(values.dtype, np.integer):
        return values, []
    stored = values.dtype.name
    values = np.asarray(values, np.float64)
    bad = ~np.isfinite(values) | (values != np.round(values))
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise InputError(
            path,
            f"a float tensor of codes, but row {r} column {c} holds {float(values[r, c])!r}, not an "
            f"integer ({int(bad.sum())} such values): codes are integers",
        )
    note = f"codes stored as {stored} floats, all integer-valued: read as integers"
    return values.astype(np.int64), [note]


def read(path: Path) -> SidMap:
    archive = open_archive(LocalFile(path), TENSOR_GLOBALS, "torch.save (one tensor)")
    t = archive.obj
    if not isinstance(t, StoredTensor):
        raise InputError(path, "expected torch.save of one tensor of codes")
    values = archive.values(t, "the codes")
    if values.ndim != 2:
        raise InputError(path, f"expected a 2-D tensor of codes, got shape {list(values.shape)}")
    codes, detected = _integers(path, values)
    m = codes_matrix(path, codes, dialect="grid.pt", framework=FRAMEWORK)
    m.detected[:0] = detected
    return m


DIALECT = register_map(
    Dialect("grid.pt", FRAMEWORK, sniff, read, usual_names=("merged_predictions_tensor.pt",))
)
