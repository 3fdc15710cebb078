"""MiniOneRec's RQ-KMeans codebooks (``rq/rqkmeans_constrained.py``, ``rqkmeans_plus``):
``np.savez_compressed(path, codebook_0=..., codebook_1=...)``, ``[K, d]`` per level. Read
with ``allow_pickle=False``."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.io.vocabulary.sids.base import Dialect, SidCodebooks, register_codebooks

FRAMEWORK = "MiniOneRec (RQ-KMeans)"
_KEY = re.compile(r"^codebook_(\d+)$")


def sniff(path: Path, head: bytes) -> bool:
    if not head.startswith(b"PK\x03\x04"):
        return False
    try:
        with zipfile.ZipFile(path) as z:
            return any(_KEY.match(n.removesuffix(".npy")) for n in z.namelist())
    except zipfile.BadZipFile:
        return False


def read(path: Path) -> SidCodebooks:
    try:
        with np.load(path, allow_pickle=False) as z:
            levels = {int(m[1]): k for k in z.files if (m := _KEY.match(k))}
            if sorted(levels) != list(range(len(levels))):
                raise InputError(path, f"codebook_i for i in {sorted(levels)}: expected 0..L-1")
            books = [np.asarray(z[levels[i]], dtype=np.float64) for i in range(len(levels))]
    except (ValueError, OSError, zipfile.BadZipFile) as e:
        raise InputError(path, f"not a readable .npz of codebooks ({e})") from None
    for i, b in enumerate(books):
        if b.ndim != 2:
            raise InputError(path, f"codebook_{i} has shape {list(b.shape)}, expected [codes, dim]")
    detected = [f"codebooks: {len(books)} levels codebook_0..codebook_{len(books) - 1}"]
    return SidCodebooks(path, "minionerec.npz", FRAMEWORK, books, detected)


DIALECT = register_codebooks(
    Dialect("minionerec.npz", FRAMEWORK, sniff, read, usual_names=("*.codebooks*.npz",))
)
