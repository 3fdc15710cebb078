"""Codebooks in a safetensors file: geodiag's own ``codebooks.safetensors`` (gti's sidecar
format: one ``[codes, code_dim]`` tensor per level, named by the level: ``a``, ``b``, ...),
else a framework's codebook tensors inside a safetensors file of its whole model, found by
the level pattern its state-dict dialect names (``torch_books.STATE_PATTERNS``): e.g.
RQ-VAE-Recommender's ``RqVae`` is a ``PyTorchModelHubMixin``, whose ``save_pretrained`` /
``push_to_hub`` write ``model.safetensors`` holding ``layers.{i}.embedding.weight`` beside
the encoder and decoder. A file that yields no codebook for any level is refused naming
what was looked for and what it holds (a codebook file that gives nothing is no input)."""

from __future__ import annotations

import string
from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.io.formats.safetensors import SafetensorsFile
from geodiag.io.formats.tensor_store import digest_text
from geodiag.io.vocabulary.sids.base import Dialect, SidCodebooks, register_codebooks
from geodiag.io.vocabulary.sids.torch_books import STATE_PATTERNS

FRAMEWORK = "geodiag / gti (codebooks.safetensors)"
SHOWN_TENSORS = 4  # tensors named in a refusal (the count is exact)


def sniff(path: Path, head: bytes) -> bool:
    """A safetensors file: an 8-byte header length, then the JSON header."""
    return len(head) > 9 and head[8:9] == b"{"


def _framework_levels(f: SafetensorsFile) -> tuple[str, str, list[str]] | None:
    """(dialect, framework, tensor names in level order) of the one framework pattern
    whose levels 0..L-1 the file holds; None when none does; refused when several do."""
    found = []
    for name, (framework, pattern) in STATE_PATTERNS.items():
        levels = {int(m[1]): t for t in f.tensors if (m := pattern.match(t))}
        if levels and sorted(levels) == list(range(len(levels))):
            found.append((name, framework, [levels[i] for i in range(len(levels))]))
    if len(found) > 1:
        which = ", ".join(f"{fw} ({names[0]}, ...)" for _, fw, names in found)
        raise InputError(f.path, f"codebook tensors of several frameworks: {which}")
    return found[0] if found else None


def _names(level_names: list[str]) -> str:
    return ", ".join(level_names[:3]) + (", ..." if len(level_names) > 3 else "")


def _holds(f: SafetensorsFile) -> str:
    shown = [f"{t} {list(i.shape)}" for t, i in list(f.tensors.items())[:SHOWN_TENSORS]]
    more = f" and {len(f.tensors) - SHOWN_TENSORS} more" if len(f.tensors) > SHOWN_TENSORS else ""
    return f"it holds {len(f.tensors)} tensors: {', '.join(shown)}{more}"


def books_in(path: Path, level_names: list[str]) -> tuple[dict[str, np.ndarray], list[str], str]:
    """(codebook per level name, what was detected, the digest of the bytes read): the
    tensors named as the levels; else a framework's level tensors in order, as levels
    ``level_names[0]``, ...; else InputError naming what was looked for and what it holds."""
    f = SafetensorsFile(path)
    named = {name: f.read(name) for name in level_names if name in f.tensors}
    if named:
        return named, [], digest_text(f.digest)
    framework = _framework_levels(f)
    if framework is None:
        patterns = "; ".join(f"{fw}: {p.pattern}" for fw, p in STATE_PATTERNS.values())
        raise InputError(
            path,
            f"no codebook for any level: looked for one [codes, code_dim] tensor per level "
            f"named {_names(level_names)} (geodiag's codebooks.safetensors), or a "
            f"framework's codebook tensors ({patterns}); {_holds(f)}",
        )
    _, name, tensors = framework
    books = {lv: f.read(t) for lv, t in zip(level_names, tensors, strict=False)}
    detected = [f"codebooks: {len(tensors)} levels from {name}'s {tensors[0]}, ... (safetensors)"]
    return books, detected, digest_text(f.digest)


def read(path: Path) -> SidCodebooks:
    """Levels ``a``, ``b``, ... as far as they run without a gap (or a framework's)."""
    names = list(string.ascii_lowercase)  # level i is named as sidecar.level_name(i)
    books, detected, _ = books_in(path, names)
    ordered = []
    for name in names:
        if name not in books:
            break
        ordered.append(np.asarray(books[name], dtype=np.float64))
    if len(ordered) != len(books):
        raise InputError(
            path, f"codebook levels {sorted(books)}: expected a, b, c, ... without a gap"
        )
    for name, book in zip(names, ordered, strict=False):
        if book.ndim != 2:
            raise InputError(
                path, f"codebook '{name}' has shape {list(book.shape)}, expected [codes, code_dim]"
            )
    return SidCodebooks(path, "codebooks.safetensors", FRAMEWORK, ordered, detected)


# No usual name: ours beside the weights (sidecar.CODEBOOKS_FILENAME) is looked for first
# by sid_index.open_foreign; any other safetensors beside them is the checkpoint's own.
DIALECT = register_codebooks(Dialect("codebooks.safetensors", FRAMEWORK, sniff, read))
