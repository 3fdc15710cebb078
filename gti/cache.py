"""Where gti keeps what it downloads or derives once (datasets, converted models,
content embeddings), and how it publishes a folder so no reader sees half of one.

The root is ``$GTI_CACHE`` when set, else ``~/.cache/gti``; every command that uses
the cache also takes ``--cache-dir``, which wins over both.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
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


@contextmanager
def staging_dir(target: Path) -> Iterator[Path]:
    """Yield an empty sibling folder of ``target``; on success it becomes ``target``.

    The rename is atomic on one filesystem, which is why the staging folder is a
    sibling and not under /tmp. If ``target`` already exists it is replaced (the old
    copy is moved aside first, then deleted). On any error the staging folder is
    removed and ``target`` is left as it was.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"))
    try:
        yield tmp
        publish_dir(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def normalize_permissions(folder: Path) -> None:
    """Give a staged folder and its files the modes a plain mkdir/open would have:
    mkdtemp/mkstemp create them private (0700/0600), which would make published
    runs and caches unreadable to the other users of a shared machine."""
    mask = _umask()
    folder.chmod(0o777 & ~mask)
    for p in folder.rglob("*"):
        p.chmod((0o777 if p.is_dir() else 0o666) & ~mask)


def publish_file(src: str | os.PathLike[str], target: Path) -> None:
    """Atomically move a finished temporary file to ``target`` with ordinary permissions."""
    os.chmod(src, 0o666 & ~_umask())
    os.replace(src, target)


def publish_dir(src: Path, target: Path) -> None:
    """Move the finished folder ``src`` to ``target``, replacing an existing one."""
    normalize_permissions(src)
    old: Path | None = None
    if target.exists():
        old = target.parent / f".{target.name}.{os.getpid()}.old"
        shutil.rmtree(old, ignore_errors=True)
        os.replace(target, old)
    try:
        os.replace(src, target)
    except BaseException:
        if old is not None:
            os.replace(old, target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
