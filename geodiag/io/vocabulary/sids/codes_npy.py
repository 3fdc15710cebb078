"""MiniOneRec's ``{dataset}.codes*.npy``: ``np.save`` of the RQ-KMeans codes, ``(items,
levels)`` int32, 0-based, before its de-duplication (collisions remain). Read with
``allow_pickle=False``; orientation detected (``base.codes_matrix``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.io.vocabulary.sids.base import Dialect, SidMap, codes_matrix, register_map

FRAMEWORK = "MiniOneRec (codes .npy)"
NPY_MAGIC = b"\x93NUMPY"


def sniff(path: Path, head: bytes) -> bool:
    return head.startswith(NPY_MAGIC)


def read(path: Path) -> SidMap:
    try:
        matrix = np.load(path, allow_pickle=False, mmap_mode="r")
    except (ValueError, OSError) as e:
        raise InputError(path, f"not a readable .npy of codes ({e})") from None
    return codes_matrix(path, np.asarray(matrix), dialect="codes.npy", framework=FRAMEWORK)


DIALECT = register_map(Dialect("codes.npy", FRAMEWORK, sniff, read, usual_names=("*.codes*.npy",)))
