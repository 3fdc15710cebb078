"""The RQ-VAE codebooks beside a checkpoint (``codebooks.safetensors`` or ``--codebooks
FILE``): per level, the codebook vector of each new token's code, validated against the
levels the new tokens resolved to (RSA's second matrix)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.io.formats.safetensors import SafetensorsFile
from geodiag.io.formats.tensor_store import digest_text, new_digest
from geodiag.io.sources.options import ReadOptions
from geodiag.io.vocabulary.new_tokens import NewTokens
from geodiag.io.vocabulary.sid_index import is_ours


def codebooks_of(
    book_path: Path, opts: ReadOptions, new: NewTokens
) -> tuple[dict[str, np.ndarray], str | None, str | None]:
    """(codebook vectors per level, why RSA is skipped or partial, the file's digest)."""
    if not new.level_names:
        note = "levels unknown (no sidecar, token names do not match --level-pattern): RSA skipped"
        return {}, note, None
    if opts.codebooks is None and not book_path.is_file():
        note = (
            "no codebooks (none beside the checkpoint as codebooks.safetensors; --codebooks FILE "
            "gives them): RSA skipped"
        )
        return {}, note, None
    return load_codebooks(book_path, new)


def load_codebooks(path: Path, new: NewTokens) -> tuple[dict[str, np.ndarray], str | None, str]:
    """Per level, the codebook vector of each new token's code, in token order, from a
    safetensors file (one tensor per level); and the file's digest.

    With a sidecar the level sizes are known and a codebook must have exactly that
    many codes; with levels parsed from token names it must cover every code seen.
    """
    if not is_ours(path):  # a framework's own file: its levels, in order, are ours a, b, ...
        from geodiag.io.vocabulary.sids import read_codebooks

        read = read_codebooks(path).books
        books = {name: read[i] for i, name in enumerate(new.level_names) if i < len(read)}
        rows, note = codebook_rows(books, new, path, path.name, exact=False)
        return rows, note, file_digest(path)
    f = SafetensorsFile(path)
    books = {name: f.read(name) for name in new.level_names if name in f.tensors}
    rows, note = codebook_rows(books, new, path, path.name, exact=new.levels_source == "sidecar")
    return rows, note, digest_text(f.digest)


def file_digest(path: Path) -> str:
    """The digest (``new_digest``) of a whole (small) codebook file, as reported."""
    h = new_digest()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return digest_text(h)


def codebook_rows(
    books: Mapping[str, np.ndarray], new: NewTokens, where: object, shown: str, *, exact: bool
) -> tuple[dict[str, np.ndarray], str | None]:
    """Per level, ``books[level]``'s row for each new token's code, in token order, and
    a note naming the levels without a codebook. ``exact``: a codebook must have as many
    codes as its level has tokens (the levels are known: a sidecar, or given in Python);
    else it must cover every code seen. ``where`` is named in errors, ``shown`` in the note."""
    out: dict[str, np.ndarray] = {}
    missing = []
    assert new.level_index is not None and new.codes is not None
    for li, name in enumerate(new.level_names):
        if name not in books:
            missing.append(name)
            continue
        book = books[name]
        codes = new.codes[new.level_index == li]
        if book.ndim != 2:
            raise InputError(
                where, f"codebook '{name}' has shape {list(book.shape)}, expected [codes, code_dim]"
            )
        if exact and book.shape[0] != len(codes):
            raise InputError(
                where,
                f"codebook '{name}' has {book.shape[0]} codes, but level '{name}' has {len(codes)}",
            )
        if codes.max() >= book.shape[0]:
            raise InputError(
                where,
                f"codebook '{name}' has {book.shape[0]} codes, but token <{name}_{codes.max()}> exists",
            )
        if not np.isfinite(book).all():
            raise InputError(where, f"codebook '{name}' holds NaN or Inf values")
        out[name] = book[codes]
    note = f"no codebook for level(s) {', '.join(missing)} in {shown}" if missing else None
    return out, note
