"""The format registry: every format geodiag recognises, in the order a path is tried
(PEFT's ``register_peft_method`` is the model: each format is one module exporting its
:class:`~geodiag.io.formats.format.Format`, and one ``register_format`` line here).

From :func:`formats` come the local opener (:func:`open_store`), the URL opener
(:func:`open_remote`), the messages for formats recognised but not read, the pre-commit
hook's file pattern (:func:`file_pattern`; ``.pre-commit-hooks.yaml`` is rendered from it
by ``python -m tools.precommit_hooks``) and the table of formats in docs/stacks.md
(:func:`formats_table`, rendered by the same tool). A path is recognised by its bytes and
layout first (magic bytes, a folder's files), by its name second.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

from geodiag.errors import InputError, cannot_read
from geodiag.io.formats.format import Format, RemoteCheckpoint, SmallFiles
from geodiag.io.formats.tensor_store import TensorStore
from geodiag.io.sources.layouts import ADAPTER_CONFIG, FSDP_FIRST_SUBFOLDER, check_not_lfs_pointer
from geodiag.io.sources.remote import INDEX, WEIGHTS, is_remote, parse

# (module of geodiag.io.formats, the name of its Format there), in the order tried.
_REGISTERED: list[tuple[str, str]] = []


def register_format(module: str, name: str = "FORMAT") -> None:
    """Add the format ``name`` of ``geodiag.io.formats.<module>``, after those registered
    before it (tried first). Its module is imported when a path first reaches it: a gate
    on a safetensors folder never imports the readers of the formats tried after it."""
    if (module, name) in _REGISTERED:
        raise ValueError(f"format {module}.{name} is registered twice")
    _REGISTERED.append((module, name))


def formats() -> Iterator[Format]:
    """Every registered format, in the order a path is tried (each module imported as the
    walk reaches it)."""
    for module, name in _REGISTERED:
        yield getattr(importlib.import_module(f"geodiag.io.formats.{module}"), name)


# The order a path is tried in: a folder's files as save_pretrained names them first,
# then the training frameworks' layouts, then those recognised but not read.
register_format("peft_adapter")
register_format("gguf_blob")
register_format("ollama")
register_format("gguf")
register_format("store", "SHARDED")
register_format("store", "SINGLE")
register_format("unread", "ZERO_MODEL_STATES")  # before torch pickle takes it for a .pt
register_format("torch_training")
register_format("litgpt")
register_format("torchtune")
register_format("torch_pickle")
register_format("dcp")
register_format("zero")
register_format("meta_llama")
register_format("meta_llama", "SHARDED")
register_format("unread", "DEEPSPEED")
register_format("unread", "SHARDED_BIN")
register_format("unread", "TENSORFLOW")
register_format("unread", "FLAX")
register_format("unread", "ONNX")


def read_formats(by_url: bool = False) -> str:
    """The formats geodiag reads on their own (by URL: those read by byte ranges), named
    as the docs table names them (each once: a format ``listed_as`` another is that one),
    for the messages of a path that holds none of them."""
    names = list(
        dict.fromkeys(
            f.listed_as or f.name
            for f in formats()
            if not f.over_base and (f.url is not None and not f.remote if by_url else f.open)
        )
    )
    return ", ".join(names[:-1]) + " or " + names[-1]


def no_weights(path: Path) -> str:
    """The exit-2 message of a local path that holds no format geodiag recognises."""
    what = "unknown weights format" if path.is_file() else "no model weights found"
    return f"{what}: geodiag reads {read_formats()} (docs/stacks.md, 'Checkpoint formats')"


def recognise(path: Path) -> tuple[Format, Path] | None:
    """(the first format that holds ``path``, the file or folder holding it), or None."""
    for fmt in formats():
        if (found := fmt.find(path)) is not None:
            return fmt, found
    return None


def open_store(path: str | os.PathLike[str]) -> TensorStore:
    """Open the tensors of a checkpoint folder or a lone weights file: the first format
    that recognises it (a PEFT adapter is read over its base by ``open_checkpoint``, not
    here); a format recognised but not read is an exit-2 message naming it."""
    p = Path(path)
    try:
        p.stat()
    except FileNotFoundError:
        raise InputError(p, "no such file or folder") from None
    except OSError as e:  # a symlink loop, a name too long, no permission
        raise cannot_read(p, e) from None
    if p.is_file():
        check_not_lfs_pointer(p)
    for fmt in formats():
        if fmt.over_base or (found := fmt.find(p)) is None:
            continue
        if fmt.open is None:
            raise InputError(p, fmt.way_out(found))
        return fmt.open(found, p)
    raise InputError(p, no_weights(p))


def open_base(base: Path | str, source: str) -> tuple[TensorStore, Path]:
    """A PEFT adapter's base (``source``: where it was named): its tensors and the folder
    of its config and tokenizer; not itself an adapter."""
    if is_remote(base):
        remote = open_remote(str(base))
        if remote.store is None:
            raise InputError(source, f"{base} is itself an adapter; pass the base checkpoint")
        return remote.store, remote.folder
    from geodiag.io.formats import peft_adapter

    if peft_adapter.is_adapter(base):
        raise InputError(source, f"{base} is itself an adapter; pass the base checkpoint")
    return open_store(base), base if base.is_dir() else base.parent


def url_suffixes() -> tuple[str, ...]:
    """The endings by which a URL names one weights file read by ranges."""
    return tuple(s for f in formats() if f.url is not None for s in f.url_suffixes)


def open_remote(url: str) -> RemoteCheckpoint:
    """The checkpoint at ``url``: its small files fetched, its weights opened by ranges by
    the first format whose URL opener takes it (a PEFT adapter folder's: the adapter's own,
    its base left to ``geodiag.io.formats.peft_adapter``)."""
    stripped = url.rstrip("/")
    last = stripped.rsplit("/", 1)[-1]
    for fmt in formats():  # a URL that names a file of a format not read by URL
        named = any(re.fullmatch(f, last) for f in fmt.files)
        if fmt.url is None and (stripped.endswith(fmt.url_suffixes) or named):
            raise InputError(stripped, fmt.remote)
    remote, name = parse(url, url_suffixes())
    small = SmallFiles(remote)
    for fmt in formats():
        if fmt.url is not None and (found := fmt.url(remote, name, small)) is not None:
            return found
    from geodiag.io.formats import dcp

    raise InputError(
        remote.where,
        f"no model weights found: by URL geodiag reads {read_formats(by_url=True)} "
        f"({WEIGHTS}, {INDEX}, {ADAPTER_CONFIG}, or a torch.distributed.checkpoint "
        f"{dcp.METADATA} here or in {FSDP_FIRST_SUBFOLDER}/; a file ending "
        f"{' or '.join(url_suffixes())} by its own URL)",
    )


def file_pattern(beside: tuple[str, ...] = ()) -> str:
    """The regex of a changed file that belongs to a checkpoint: every format's files,
    then ``beside`` (regexes of the files read beside the weights), as pre-commit's
    ``files:`` takes it."""
    names = dict.fromkeys([f for fmt in formats() for f in fmt.files] + list(beside))
    return "(^|/)(" + "|".join(names) + ")$"  # each once: two formats may share a name


def formats_table() -> str:
    """docs/stacks.md's table of formats: each one, how it is read on disk and by URL."""
    lines = [
        "| format | what | on disk | by URL |",
        "| --- | --- | --- | --- |",
    ]
    for fmt in formats():
        if fmt.over_base:
            local = "read over its base"
        elif fmt.open is not None:
            local = "read"
        else:
            local = "recognised, not read: exit 2 with the command that converts it"
        by_url = (
            "read by byte ranges"
            if fmt.url is not None and not fmt.remote
            else "no: " + (fmt.remote)
        )
        lines.append(f"| {fmt.name} | {fmt.what} | {local} | {by_url} |")
    return "\n".join(lines) + "\n"
