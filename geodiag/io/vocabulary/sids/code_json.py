"""ETEGRec's ``{epoch}.code.json``: ``json.dump(code.tolist())`` of its item-code tensor, a
list whose row 0 is the padding item (``[-1, -1, -1, -1]``) and row ``i`` item ``i``'s
``[c0, c1, c2, dedup]``. Orientation, the padding row and the de-duplication digit are
detected from the data (``base.codes_matrix``). Read through ``files.read_json``: a
UTF-8 byte-order mark dropped, gzip decompressed, a document cut short refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.io.vocabulary.sids.base import Dialect, SidMap, codes_matrix, register_map
from geodiag.io.vocabulary.sids.files import read_json

FRAMEWORK = "ETEGRec"


def sniff(path: Path, head: bytes) -> bool:
    """A JSON list of lists of integers."""
    text = head.lstrip()
    return text.startswith(b"[") and text[1:].lstrip().startswith(b"[")


def read(path: Path) -> SidMap:
    data = read_json(path)
    try:
        matrix = np.array(data, dtype=np.int64)
    except (ValueError, TypeError, OverflowError):
        raise InputError(path, "expected a JSON list of equal-length lists of integers") from None
    return codes_matrix(
        path, matrix, dialect="code.json", framework=FRAMEWORK, items_along_rows=True
    )


DIALECT = register_map(
    Dialect("code.json", FRAMEWORK, sniff, read, usual_names=("*.code.json",), reads_gzip=True)
)
