"""Where gti keeps what it downloads or derives once (datasets, converted models,
content embeddings). Entries are published with ``geodiag.atomic`` (``atomic_dir``,
``atomic_path``), so no reader sees half of one.

The root is ``$GTI_CACHE`` when set, else ``~/.cache/gti``; every command that uses
the cache also takes ``--cache-dir``, which wins over both.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "GTI_CACHE"


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The cache root: explicit argument, then ``$GTI_CACHE``, then ``~/.cache/gti``."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "gti"
