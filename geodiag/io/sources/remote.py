"""A checkpoint folder behind a URL, read in place: ``https://host/path/folder`` (``http://``
too), ``hf://ORG/NAME[@REVISION][/SUBFOLDER]``, ``s3://BUCKET/PREFIX`` or
``gs://BUCKET/PREFIX`` (``geodiag.io.sources.object_store``).

The small files beside the weights (:data:`SMALL_FILES`: config, tokenizer, sidecar,
codebooks, a Trainer's state, the shard index) are fetched whole into a temporary folder that the rest of
the reader treats as the checkpoint's folder, removed when the process exits. The
weights are not (``geodiag.io.formats.registry.open_remote`` opens them): of ``model.safetensors`` (or the shards its index names), of a ``.gguf``
file's URL, or of a PEFT adapter folder's ``adapter_model.safetensors`` only the header
and then the byte ranges of the rows asked for are read (``geodiag.io.sources.byte_ranges``). An
adapter's base is opened by ``geodiag.io.formats.peft_adapter``, by URL or from a local folder.

A torch.distributed.checkpoint folder is read in place the same way (``geodiag.io.formats.dcp``,
the local reader through a :class:`~geodiag.io.sources.byte_ranges.Folder`): ``.metadata`` whole,
which names the ``.distcp`` files, then each chunk's archive edges and its rows. It is the
folder itself when ``.metadata`` is there, else its ``pytorch_model_fsdp_0/`` (a Trainer or
accelerate ``checkpoint-N/``; only the first model's, a URL not being listable); a URL of
``pytorch_model_fsdp_*`` itself has the small files of the folder above fetched too, as
the local reader looks beside its parent.

``hf://`` resolves to ``{HF_ENDPOINT or https://huggingface.co}/ORG/NAME/resolve/REVISION/PATH``
(REVISION ``main`` unless given), with the token huggingface_hub would send as a Bearer
token (``HF_TOKEN``, or the file of ``hf auth login``: ``geodiag.io.sources.hub_auth``, which also
says what a refusal means: a gated repository, a token the Hub does not take); stderr says
where the token came from. The files are found by asking for each known name (HEAD), so a
mirror that serves only the resolve route works. The URL is shown as given, less any
user:password in it; the token never is.
"""

from __future__ import annotations

import atexit
import os
import posixpath
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from geodiag.errors import InputError
from geodiag.io.sources import byte_ranges, hub_auth, object_store
from geodiag.progress import to_stderr

SCHEMES = ("https://", "http://", "hf://", *object_store.SCHEMES)
HF_ENDPOINT = "https://huggingface.co"  # unless the environment's HF_ENDPOINT says otherwise
WEIGHTS = "model.safetensors"
INDEX = "model.safetensors.index.json"
# Fetched whole when present (each one HEAD, then a GET): every file the reader looks for
# beside the weights (beside a GGUF, which carries its config and tokenizer, only the
# sidecar and the codebooks: GGUF_SMALL_FILES).
SMALL_FILES = (
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "semantic_ids.json",
    "codebooks.safetensors",
    "trainer_state.json",  # a Trainer's checkpoint-N/: names the stack, as locally
    INDEX,
)
GGUF_SMALL_FILES = ("semantic_ids.json", "codebooks.safetensors")


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
    refusal: byte_ranges.Refusal | None = field(default=None, repr=False)  # a 401/403 explained

    def url(self, name: str) -> str:
        return f"{self.base}/{quote(name)}"

    def shown(self, name: str) -> str:
        return f"{self.where}/{name}"

    def exists(self, name: str, required: bool = False) -> bool:  # HTTP: 403 is always an error
        return byte_ranges.exists(self.url(name), self.shown(name), self.headers, self.refusal)

    def fetch(self, name: str) -> bytes:
        return byte_ranges.fetch_whole(self.url(name), self.shown(name), self.headers, self.refusal)

    def file(self, name: str) -> byte_ranges.HttpFile:
        return byte_ranges.HttpFile(
            self.url(name), self.shown(name), self.headers, refusal=self.refusal
        )

    def child(self, name: str) -> RemoteFolder:
        return RemoteFolder(self.url(name), self.shown(name), self.headers, self.refusal)

    def parent(self) -> RemoteFolder:
        base, where = self.base.rsplit("/", 1)[0], self.where.rsplit("/", 1)[0]
        return RemoteFolder(base, where, self.headers, self.refusal)


def parse(
    url: str, weight_suffixes: tuple[str, ...]
) -> tuple[RemoteFolder | object_store.ObjectFolder, str | None]:
    """(the folder, the weights file's name when ``url`` names one rather than a folder:
    it ends in one of ``weight_suffixes``, the formats' read by URL)."""
    url = url.rstrip("/")
    if url.startswith(object_store.SCHEMES):
        name = None
        if url.endswith(weight_suffixes):
            url, _, name = url.rpartition("/")
        return object_store.open_folder(url), name
    if url.startswith("hf://"):
        name = None
        if url.endswith(weight_suffixes) and url.count("/") > 3:  # hf://ORG/NAME/FILE
            url, _, name = url.rpartition("/")
        folder = _hf_folder(url)
    else:
        parts = urlsplit(url)
        if not parts.hostname:
            raise InputError(url, "not a URL with a host (https://HOST/PATH)")
        netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
        shown = urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
        name = None
        if parts.path.endswith(weight_suffixes):
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
    if not endpoint.startswith(("https://", "http://")):
        raise InputError(
            url,
            f"HF_ENDPOINT is {endpoint!r}, not an http(s):// URL: set it to the Hub or a mirror",
        )
    base = f"{endpoint}/{repo}/resolve/{quote(revision or 'main', safe='')}"
    if sub:
        base += "/" + quote(sub)
    token = hub_auth.find_token()
    headers = {"Authorization": f"Bearer {token.value}"} if token else {}
    if token is not None and token.source not in _SAID:  # once a process: which login it is
        _SAID.add(token.source)
        to_stderr(f"hf://: sending the Hub token from {token.source}")
    return RemoteFolder(base, url, headers, hub_auth.explains_refusal(token, f"{endpoint}/{repo}"))


_SAID: set[str] = set()  # the token sources said on stderr


def fetch_small_files(remote, names: tuple[str, ...]) -> Path:
    """A fresh folder holding those of ``names`` that ``remote`` has."""
    folder = _cache_folder(remote)
    for name in names:
        if remote.exists(name):
            (folder / name).write_bytes(remote.fetch(name))
    return folder


def _cache_folder(remote: RemoteFolder | object_store.ObjectFolder) -> Path:
    """A fresh folder for the fetched files, alone in its own temporary parent (so nothing
    looks beside it for sibling checkpoints), removed at exit."""
    import tempfile  # a URL's small files only

    parent = Path(tempfile.mkdtemp(prefix="geodiag-remote-"))
    atexit.register(shutil.rmtree, parent, ignore_errors=True)
    name = remote.where.rstrip("/").rsplit("/", 1)[-1] or "checkpoint"
    folder = parent / "".join(c if c.isalnum() or c in "-_.@" else "_" for c in name)
    folder.mkdir()
    return folder


def beside(location: str, relative: str) -> str | None:
    """The URL ``relative`` (a POSIX path, as a sidecar's ``init_checkpoint``) names from the
    folder at URL ``location``; None when it climbs out of what the URL can reach (the
    repository of an ``hf://`` URL, the bucket of an object store's, the host's root) or is
    absolute (a path on the machine that wrote it)."""
    if not relative or relative.startswith("/"):
        return None
    if location.startswith("hf://"):
        parts = location[len("hf://") :].split("/")
        root, inside = "hf://" + "/".join(parts[:2]), "/".join(parts[2:])
    else:
        scheme, _, rest = location.partition("://")
        host, _, inside = rest.partition("/")
        root = f"{scheme}://{host}"
    joined = posixpath.normpath(posixpath.join(inside or ".", relative))
    if joined == ".." or joined.startswith("../"):
        return None
    return root if joined == "." else f"{root}/{joined}"
