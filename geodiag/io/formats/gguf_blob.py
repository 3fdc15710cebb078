"""A GGUF file known by its bytes, whatever its name: model stores keep their weights as
blobs named by their digest (Ollama's ``blobs/sha256-<64 hex digits>``, no ``.gguf``), so
the name says nothing and GGUF's magic (``GGUF``, the file's first four bytes) says what it
is. Read as a ``.gguf`` file is (:class:`~geodiag.io.formats.gguf.GGUFStore`); by URL
only under a ``.gguf`` name, since a URL without one is taken for a folder's.
"""

from __future__ import annotations

from pathlib import Path

from geodiag.io.formats.format import Format, head
from geodiag.io.formats.gguf import MAGIC, GGUFStore


def find(path: Path) -> Path | None:
    """``path`` itself when it is a file that starts with GGUF's magic (a ``.gguf`` name is
    ``geodiag.io.formats.gguf``'s entry, whose reader checks the magic itself)."""
    if not path.is_file() or path.suffix == ".gguf":
        return None
    return path if head(path, len(MAGIC)) == MAGIC else None


FORMAT = Format(
    name="GGUF by its bytes",
    what="a file that starts with GGUF's magic whatever its name (a model store's blob, "
    "`sha256-<digest>`), read as a `.gguf` file",
    find=find,
    open=lambda found, asked: GGUFStore(found),
    remote=(
        "a GGUF blob named by its digest is not read by URL (a URL without a .gguf name is "
        "taken for a folder's): download it, or serve it under a .gguf name"
    ),
    files=(r"sha256-[0-9a-f]{64}",),
    listed_as="GGUF",  # a .gguf file by another name: the messages name GGUF once
)
