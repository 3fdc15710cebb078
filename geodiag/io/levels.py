"""The ``levels`` argument of the Python API and the Trainer callback: which token ids
are the codes of each level, from a mapping or from a ``semantic_ids.json``."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.io import sidecar
from geodiag.io.memory import is_torch

Levels = Mapping[str, Sequence[int]] | str | os.PathLike[str] | sidecar.SemanticIds


def token_ids(x, what: str) -> np.ndarray:
    """``x`` (a sequence, an array or a tensor) as distinct int64 token ids; ``what``
    names the argument in the error."""
    if is_torch(x):
        x = x.detach().cpu().numpy()
    a = np.asarray(x)
    if a.ndim != 1 or a.size == 0 or not np.issubdtype(a.dtype, np.integer):
        raise InputError(what, f"expected a non-empty 1-D sequence of token ids, got {a!r:.80}")
    if len(np.unique(a)) != len(a):
        raise InputError(what, "token ids repeat")
    return a.astype(np.int64)


def read_levels(levels: Levels) -> tuple[dict[str, np.ndarray], Path | None]:
    """{level name: token ids in code order}, and the sidecar file they came from."""
    if isinstance(levels, str | os.PathLike):
        path = Path(levels)
        path = path / sidecar.FILENAME if path.is_dir() else path
        levels = sidecar.load(path)
        if not levels.has_token_ids:
            raise InputError(path, "has no token ids yet (written before vocabulary extension)")
        return {lv.name: np.asarray(lv.token_ids, np.int64) for lv in levels.levels}, path
    if isinstance(levels, sidecar.SemanticIds):
        return {lv.name: np.asarray(lv.token_ids, np.int64) for lv in levels.levels}, None
    if not isinstance(levels, Mapping) or not levels:
        raise InputError("levels", "expected {level name: token ids in code order} or a sidecar")
    return {str(k): token_ids(v, f"levels['{k}']") for k, v in levels.items()}, None
