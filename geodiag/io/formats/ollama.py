"""Ollama's model store (``~/.ollama/models/``): a manifest per model,
``manifests/<registry>/<namespace>/<name>/<tag>`` (``registry.ollama.ai/library/NAME/TAG``),
a small JSON object whose ``layers`` name blobs by digest; the layer of media type
``application/vnd.ollama.image.model`` is the model's GGUF file, kept as
``blobs/sha256-<hex>``. A manifest is read as the GGUF it names
(:class:`~geodiag.io.formats.gguf.GGUFStore`); the store's folder, when it holds one model.
On disk only: a URL cannot list the store, and a manifest is fetched by name alone.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from geodiag.errors import InputError, cannot_read
from geodiag.io.formats.format import Format, RemoteCheckpoint, SmallFiles, head
from geodiag.io.formats.gguf import GGUFStore

MANIFESTS, BLOBS = "manifests", "blobs"
MODEL_LAYER = "application/vnd.ollama.image.model"
# A manifest is a few hundred bytes; anything much larger under manifests/ is not one.
MANIFEST_MAX_BYTES = 1 << 20
_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")
# A manifest's place: manifests/<registry>/<namespace>/<name>/<tag>.
_MANIFEST_URL = re.compile(rf"/{MANIFESTS}/[^/]+/[^/]+/[^/]+/[^/]+$")


def _store_root(manifest: Path) -> Path | None:
    """The models/ folder above ``manifest`` (the parent of its ``manifests/``)."""
    parents = list(manifest.parents)  # <name>/, <namespace>/, <registry>/, manifests/, ...
    return parents[4] if len(parents) > 4 and parents[3].name == MANIFESTS else None


def _is_manifest(path: Path) -> bool:
    if _store_root(path) is None or head(path, 1) != b"{":
        return False
    try:
        return path.stat().st_size <= MANIFEST_MAX_BYTES
    except OSError:
        return False


def _manifests(store: Path) -> list[Path]:
    return sorted(p for p in (store / MANIFESTS).glob("*/*/*/*") if p.is_file())


def find(path: Path) -> Path | None:
    """A manifest file, or a store folder (``manifests/`` beside ``blobs/``)."""
    if path.is_file():
        return path if _is_manifest(path) else None
    return path if (path / MANIFESTS).is_dir() and (path / BLOBS).is_dir() else None


def _name(manifest: Path) -> str:
    """``NAME:TAG`` as ``ollama`` names it (``NAMESPACE/NAME:TAG`` outside ``library``)."""
    namespace, name, tag = manifest.parts[-3:]
    return f"{name}:{tag}" if namespace == "library" else f"{namespace}/{name}:{tag}"


def model_blob(manifest: Path) -> Path:
    """The GGUF blob the manifest's model layer names; exit 2 when it names none or the
    blob is not in the store."""
    try:
        layers = json.loads(manifest.read_text(encoding="utf-8"))["layers"]
        digests = [layer["digest"] for layer in layers if layer.get("mediaType") == MODEL_LAYER]
    except OSError as e:
        raise cannot_read(manifest, e) from None
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, AttributeError):
        raise InputError(
            manifest, "not an Ollama manifest (needs a 'layers' list of media types and digests)"
        ) from None
    if len(digests) != 1 or not isinstance(digests[0], str):
        raise InputError(
            manifest, f"an Ollama manifest with {len(digests)} model layers ({MODEL_LAYER}), not 1"
        )
    if (m := _DIGEST.fullmatch(digests[0])) is None:
        raise InputError(manifest, f"names model layer '{digests[0]}', not a sha256 digest")
    blob = _store_root(manifest) / BLOBS / f"sha256-{m.group(1)}"
    if not blob.is_file():
        raise InputError(
            manifest,
            f"names the model blob {blob.name}, which is not in {blob.parent}: pull it again "
            f"(`ollama pull {_name(manifest)}`)",
        )
    return blob


def _open(found: Path, asked: Path) -> GGUFStore:
    manifest = found
    if found.is_dir():
        manifests = _manifests(found)
        if len(manifests) != 1:
            shown = ", ".join(str(p.relative_to(found)) for p in manifests[:3])
            more = f" and {len(manifests) - 3} more" if len(manifests) > 3 else ""
            raise InputError(
                found,
                f"an Ollama model store with {len(manifests)} models"
                + (f" ({shown}{more})" if manifests else "")
                + f": pass the manifest of the one to read, {MANIFESTS}/<registry>/<namespace>"
                "/<name>/<tag>",
            )
        manifest = manifests[0]
    store = GGUFStore(model_blob(manifest))
    store.description = f"Ollama model {_name(manifest)} ({store.description})"
    return store


REMOTE = (
    "an Ollama manifest is read on disk only (the store it names blobs in is not listed by "
    "URL): `ollama pull` it, or download its model blob, the GGUF file, and check that"
)


def url(remote, name: str | None, small: SmallFiles) -> RemoteCheckpoint | None:
    """A URL whose path ends as a manifest's does: named, not read."""
    if name is None and _MANIFEST_URL.search(remote.where.rstrip("/")):
        raise InputError(remote.where, REMOTE)
    return None


FORMAT = Format(
    name="Ollama",
    what="an Ollama manifest (`manifests/registry.ollama.ai/library/NAME/TAG`) or a store "
    "holding one model: the GGUF blob its model layer names",
    find=find,
    open=_open,
    url=url,
    remote=REMOTE,
)
