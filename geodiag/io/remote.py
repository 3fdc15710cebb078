"""A checkpoint folder behind a URL, read in place: ``https://host/path/folder`` (``http://``
too), ``hf://ORG/NAME[@REVISION][/SUBFOLDER]``, ``s3://BUCKET/PREFIX`` or
``gs://BUCKET/PREFIX`` (``geodiag.io.object_store``).

The small files beside the weights (:data:`SMALL_FILES`: config, tokenizer, sidecar,
codebooks, the shard index) are fetched whole into a temporary folder that the rest of
the reader treats as the checkpoint's folder, removed when the process exits. The
weights are not: of ``model.safetensors`` (or the shards its index names) only the header
and then the byte ranges of the rows asked for are read (``geodiag.io.byte_ranges``).

``hf://`` resolves to ``{HF_ENDPOINT or https://huggingface.co}/ORG/NAME/resolve/REVISION/PATH``
(REVISION ``main`` unless given), with ``HF_TOKEN`` sent as a Bearer token; the files are
found by asking for each known name (HEAD), so a mirror that serves only the resolve route
works. The URL is shown as given, less any user:password in it; the token never is.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from geodiag.errors import InputError
from geodiag.io import byte_ranges, object_store
from geodiag.io.safetensors import SafetensorsFile
from geodiag.io.store import SafetensorsStore, shard_names, sharded_description
from geodiag.io.tensor_store import TensorStore

SCHEMES = ("https://", "http://", "hf://", *object_store.SCHEMES)
HF_ENDPOINT = "https://huggingface.co"  # unless the environment's HF_ENDPOINT says otherwise
WEIGHTS = "model.safetensors"
INDEX = "model.safetensors.index.json"
# Fetched whole when present (each one HEAD, then a GET): every file the reader looks for
# beside the weights. An adapter folder (adapter_config.json) is not read remotely yet.
SMALL_FILES = (
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "semantic_ids.json",
    "codebooks.safetensors",
    INDEX,
)


def is_remote(path: str | os.PathLike[str]) -> bool:
    """``path`` is a URL this module reads. A URL passed through ``Path`` loses one slash
    (``https:/host``), so the string is checked as given."""
    return isinstance(path, str) and path.startswith(SCHEMES)


@dataclass
class RemoteFolder:
    """Where a folder's files are fetched from, and how they are shown."""

    base: str  # URL of the folder, no trailing slash
    where: str  # the folder as shown: the URL as given, no credentials
    headers: dict[str, str] = field(default_factory=dict, repr=False)

    def url(self, name: str) -> str:
        return f"{self.base}/{quote(name)}"

    def shown(self, name: str) -> str:
        return f"{self.where}/{name}"

    def exists(self, name: str, required: bool = False) -> bool:  # HTTP: 403 is always an error
        return byte_ranges.exists(self.url(name), self.shown(name), self.headers)

    def fetch(self, name: str) -> bytes:
        return byte_ranges.fetch_whole(self.url(name), self.shown(name), self.headers)

    def file(self, name: str) -> byte_ranges.HttpFile:
        return byte_ranges.HttpFile(self.url(name), self.shown(name), self.headers)


def parse(url: str) -> tuple[RemoteFolder | object_store.ObjectFolder, str | None]:
    """(the folder, the weights file's name when ``url`` names one rather than a folder)."""
    url = url.rstrip("/")
    if url.startswith(object_store.SCHEMES):
        name = None
        if url.endswith(".safetensors"):
            url, _, name = url.rpartition("/")
        return object_store.open_folder(url), name
    if url.startswith("hf://"):
        folder = _hf_folder(url)
        name = None
    else:
        parts = urlsplit(url)
        if not parts.hostname:
            raise InputError(url, "not a URL with a host (https://HOST/PATH)")
        netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
        shown = urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
        name = None
        if parts.path.endswith(".safetensors"):
            head, _, name = parts.path.rpartition("/")
            parts = parts._replace(path=head)
            shown = shown.rsplit("/", 1)[0]
        base = urlunsplit((parts.scheme, netloc, parts.path, "", ""))
        folder = RemoteFolder(base, shown)
    return folder, name


def _hf_folder(url: str) -> RemoteFolder:
    """``hf://ORG/NAME[@REVISION][/SUBFOLDER]`` -> its resolve route on the endpoint."""
    rest = url[len("hf://") :]
    parts = rest.split("/")
    if len(parts) < 2 or not parts[0] or not parts[1]:
        raise InputError(url, "not a Hub repository: expected hf://ORG/NAME[@REVISION][/SUBFOLDER]")
    name, _, revision = parts[1].partition("@")
    repo = f"{parts[0]}/{name}"
    sub = "/".join(p for p in parts[2:] if p)
    endpoint = (os.environ.get("HF_ENDPOINT") or HF_ENDPOINT).rstrip("/")
    base = f"{endpoint}/{repo}/resolve/{quote(revision or 'main', safe='')}"
    if sub:
        base += "/" + quote(sub)
    token = os.environ.get("HF_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return RemoteFolder(base, url, headers)


@dataclass
class RemoteCheckpoint:
    folder: Path  # the small files, fetched: what the reader looks beside the weights in
    store: TensorStore
    where: str  # the URL as shown


def open_remote(url: str) -> RemoteCheckpoint:
    """Fetch the small files of the folder at ``url`` and open its weights by ranges."""
    remote, weights = parse(url)
    folder = _cache_folder(remote)
    present = [name for name in SMALL_FILES if remote.exists(name)]
    if weights is None and remote.exists("adapter_config.json"):
        raise InputError(
            remote.where, "a PEFT adapter folder: adapters are not read remotely yet; download it"
        )
    for name in present:
        (folder / name).write_bytes(remote.fetch(name))

    def open_file(where: str) -> SafetensorsFile:
        return SafetensorsFile(where, remote.file(where.rsplit("/", 1)[1]))

    if weights is None and INDEX in present:
        shards = shard_names(folder / INDEX)
        files = {name: remote.shown(shard) for name, shard in shards.items()}
        store = SafetensorsStore(files, sharded_description(shards, INDEX), open_file)
    else:
        weights = weights or WEIGHTS
        if weights == WEIGHTS and not remote.exists(WEIGHTS, required=True):
            raise InputError(
                remote.where,
                f"no model weights found ({WEIGHTS} or {INDEX}; remotely only safetensors "
                "are read)",
            )
        f = open_file(remote.shown(weights))
        store = SafetensorsStore(
            {name: f.path for name in f.keys()}, f"safetensors file {weights}", open_file
        )
        store._open[f.path] = f
    from geodiag.io.mlx_quantized import dequantizing  # MLX's packed matrices, if any

    return RemoteCheckpoint(folder, dequantizing(store, folder), remote.where)


def _cache_folder(remote: RemoteFolder) -> Path:
    """A fresh folder for the fetched files, alone in its own temporary parent (so nothing
    looks beside it for sibling checkpoints), removed at exit."""
    parent = Path(tempfile.mkdtemp(prefix="geodiag-remote-"))
    atexit.register(shutil.rmtree, parent, ignore_errors=True)
    name = remote.where.rstrip("/").rsplit("/", 1)[-1] or "checkpoint"
    folder = parent / "".join(c if c.isalnum() or c in "-_.@" else "_" for c in name)
    folder.mkdir()
    return folder
