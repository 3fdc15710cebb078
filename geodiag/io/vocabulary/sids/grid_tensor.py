"""GRID's ``merged_predictions_tensor.pt``: ``torch.save`` of one int64 tensor, the items'
codes after its post-processing (a de-duplication column appended, then transposed):
shape ``(levels + 1, items)``, the last row the de-duplication digit (0 for an item alone,
1..N within a group sharing the other digits). Read without torch (``torch_zip``)."""

from __future__ import annotations

from pathlib import Path

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
    return isinstance(obj, StoredTensor) and obj.dtype.startswith(("I", "U"))


def read(path: Path) -> SidMap:
    archive = open_archive(LocalFile(path), TENSOR_GLOBALS, "torch.save (one tensor)")
    t = archive.obj
    if not isinstance(t, StoredTensor):
        raise InputError(path, "expected torch.save of one integer tensor of codes")
    return codes_matrix(
        path, archive.values(t, "the codes"), dialect="grid.pt", framework=FRAMEWORK
    )


DIALECT = register_map(
    Dialect("grid.pt", FRAMEWORK, sniff, read, usual_names=("merged_predictions_tensor.pt",))
)
