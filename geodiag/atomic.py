"""Publishing files and folders atomically, with one permission policy, for the whole
project (gti imports it; geodiag never imports gti).

Everything is built in a temporary sibling of its target (same filesystem, so the
final ``os.replace`` is atomic) and renamed into place: a reader sees the old
version or the new one, never half of one, and an error leaves nothing behind.
``mkstemp``/``mkdtemp`` create private entries (0600/0700); what is published gets
the mode a plain ``open``/``mkdir`` would give it under the current umask, so runs,
reports and caches stay readable to the other users of a shared machine.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from geodiag.errors import os_reason

Text = str | bytes | Iterable[str]


def umask() -> int:
    """The process umask (reading it means setting it; it is put back at once)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def publish_mode(*, folder: bool = False) -> int:
    """The mode ``open`` (0666) or ``mkdir`` (0777) would give under the umask."""
    return (0o777 if folder else 0o666) & ~umask()


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary sibling file of ``path`` (created empty) to write by any means;
    on success it gets the publish mode and replaces ``path``; on error it is removed."""
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as e:
        raise unwritable(target, e) from e
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        try:
            os.chmod(tmp, publish_mode())
            os.replace(tmp, target)
        except OSError as e:
            raise unwritable(target, e) from e
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def unwritable(target: Path, e: OSError) -> OSError:
    """The error of a failed publish as the user sees it: naming ``target``, not its
    temporary sibling or the parent folder that could not be made, and saying why."""
    blocker = next((p for p in target.parents if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        reason = f"cannot write: {blocker} is a file, not a folder"
    else:
        reason = f"cannot write ({os_reason(e)})"
    return OSError(e.errno, reason, str(target))  # the errno's subclass, as open() raises


def _write(tmp: Path, data: Text) -> None:
    if isinstance(data, bytes):
        tmp.write_bytes(data)
        return
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.writelines([data] if isinstance(data, str) else data)


def atomic_write(path: str | os.PathLike[str], data: Text) -> Path:
    """Write ``data`` (text, bytes, or an iterable of text chunks; text as UTF-8 with
    ``\\n`` line ends) to ``path`` atomically; returns the path."""
    with atomic_path(path) as tmp:
        _write(tmp, data)
    return Path(path)


def check_writable(files: Iterable[Path]) -> None:
    """Raise now the error a later atomic_write_many(files) would, where it can be known:
    before minutes of work, not after. A file that is a folder, or whose nearest existing
    folder takes no new file (probed with a temporary file, removed at once), fails;
    nothing is created."""
    for path in files:
        target = Path(path)
        if target.is_dir():
            raise unwritable(target, IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR)))
        folder = next((p for p in target.parents if p.exists()), None)
        try:
            if folder is None or not folder.is_dir():
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
            fd, name = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".probe")
        except OSError as e:
            raise unwritable(target, e) from e
        os.close(fd)
        os.unlink(name)


def atomic_write_many(files: dict[Path, Text]) -> None:
    """Write several files that belong together: all are written to temporary siblings
    first, then renamed one after the other, so a failure while writing leaves none."""
    for path in files:  # checked first: a failed rename after another must not happen
        if Path(path).is_dir():
            raise unwritable(Path(path), IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR)))
    with ExitStack() as stack:
        for path, data in files.items():
            _write(stack.enter_context(atomic_path(path)), data)


@contextmanager
def atomic_dir(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield an empty sibling folder of ``target``; on success it becomes ``target``.

    If ``target`` already exists it is replaced (the old copy is moved aside first,
    then deleted). On any error the staging folder is removed and ``target`` is left
    as it was.
    """
    target = Path(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"))
    except OSError as e:
        raise unwritable(target, e) from e
    try:
        yield tmp
        _publish_dir(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _publish_dir(src: Path, target: Path) -> None:
    """Give ``src`` and its contents the publish modes, then move it to ``target``."""
    src.chmod(publish_mode(folder=True))
    for p in src.rglob("*"):
        p.chmod(publish_mode(folder=p.is_dir()))
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
