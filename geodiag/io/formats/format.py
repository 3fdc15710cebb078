"""What the format registry (``geodiag.io.formats.registry``) knows of one format: how it
is recognised in a path, from its bytes and layout first and its file names second; how
it is opened on disk and behind a URL, or why it is not; which file names hold it (the
pre-commit hook's list). Each format module exports its :class:`Format`; the registry
orders them and derives the openers, the hook's file list and the docs table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from geodiag.errors import InputError
from geodiag.io.formats.tensor_store import TensorStore
from geodiag.io.sources.remote import SMALL_FILES, fetch_small_files


@dataclass(frozen=True)
class Format:
    """One format a checkpoint's tensors come in.

    ``find(path)``: the file or folder under ``path`` (the path itself, or a file or
    subfolder of it) that holds this format, or None. ``open(found, asked)``: its store;
    None for a format recognised but not read, whose ``way_out(found)`` is the exit-2
    message (what it is, and the command that converts it). ``url(folder, name, small)``:
    the checkpoint behind a URL (``name``: the file the URL names, None for a folder;
    ``small``: the folder's small files, fetched once when first asked), None when it is
    not this format; None as a field when it is not read by URL, ``remote`` saying why.
    """

    name: str  # short, as messages and the docs table name it
    what: str  # what it is, for the docs table
    find: Callable[[Path], Path | None]
    open: Callable[[Path, Path], TensorStore] | None = None
    way_out: Callable[[Path], str] | None = None
    url: Callable[[Any, str | None, SmallFiles], RemoteCheckpoint | None] | None = None
    remote: str = ""  # why it is not read by URL, and what to do
    files: tuple[str, ...] = ()  # regexes of the file names that hold it (pre-commit)
    url_suffixes: tuple[str, ...] = ()  # a URL ending so names one file of this format
    over_base: bool = False  # read over another checkpoint by open_checkpoint, not alone
    # The name messages list it under, when another format's (GGUF by its bytes is GGUF).
    listed_as: str = ""

    def __post_init__(self) -> None:  # each says how it is read, or why not
        assert self.over_base or (self.open is None) != (self.way_out is None), self.name
        assert self.url is not None or self.remote, self.name


@dataclass
class RemoteCheckpoint:
    folder: Path  # the small files, fetched: what the reader looks beside the weights in
    store: (
        TensorStore | None
    )  # None for an adapter folder: geodiag.io.formats.peft_adapter builds it
    where: str  # the URL as shown
    roots: list[Path]  # the folders of fetched small files to look in, first wins
    # An adapter folder's adapter_model.safetensors, by ranges (its config is in ``folder``).
    adapter_weights: TensorStore | None = None

    def shown(self, name: str) -> str:
        return f"{self.where}/{name}"


@dataclass
class SmallFiles:
    """A URL folder's small files (:data:`~geodiag.io.sources.remote.SMALL_FILES`), fetched
    into a temporary folder the first time a format asks for them, once."""

    remote: Any
    _folder: Path | None = field(default=None, repr=False)

    def folder(self) -> Path:
        if self._folder is None:
            self._folder = fetch_small_files(self.remote, SMALL_FILES)
        return self._folder


def head(path: Path, n: int = 16) -> bytes:
    """The first ``n`` bytes of the file ``path``; empty for a folder or an unreadable file
    (whose reader then names the problem)."""
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except OSError:
        return b""


def one_file(path: Path, names: tuple[str, ...]) -> Path | None:
    """``path`` itself when it is a file named one of ``names``, else its file of that name
    when it is a folder holding one (the first of ``names`` found)."""
    if path.is_file():
        return path if path.name in names else None
    return next((path / n for n in names if (path / n).is_file()), None)


def on_disk_only(marker: str, message: str) -> Callable[..., RemoteCheckpoint | None]:
    """A :class:`Format`'s ``url`` for a format read on disk only: a URL folder holding
    ``marker`` is named, not read (exit 2 with ``message``); None for any other URL."""

    def url(remote, name: str | None, small: SmallFiles) -> RemoteCheckpoint | None:
        if name is None and remote.exists(marker):
            raise InputError(remote.where, message)
        return None

    return url
