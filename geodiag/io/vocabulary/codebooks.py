"""The RQ-VAE codebooks beside a checkpoint (``codebooks.safetensors`` or ``--codebooks
FILE``): per level, the codebook vector of each new token's code, validated against the
levels the new tokens resolved to (RSA's second matrix)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.io.formats.tensor_store import digest_text, new_digest
from geodiag.io.sources.options import ReadOptions
from geodiag.io.vocabulary.new_tokens import NewTokens
from geodiag.io.vocabulary.sid_index import is_ours
from geodiag.io.vocabulary.sidecar import SemanticIds


def codebooks_of(
    book_path: Path, opts: ReadOptions, new: NewTokens, sizes: Mapping[str, int] | None
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
    return load_codebooks(book_path, new, sizes)


def books_in_file(path: Path, level_names: list[str]) -> tuple[dict[str, np.ndarray], str]:
    """{level name: codebook} from a codebook file and its digest: a safetensors file by
    its level names (else a framework's level tensors in it: ``safetensors_books``), a
    framework's own file by its levels in order, as ``level_names[0]``, ...; a file that
    yields none is refused naming what was looked for and what it holds."""
    if is_ours(path):
        from geodiag.io.vocabulary.sids.safetensors_books import books_in

        books, _, digest = books_in(path, level_names)
        return books, digest
    from geodiag.io.vocabulary.sids import read_codebooks

    read = read_codebooks(path).books
    return {name: read[i] for i, name in enumerate(level_names) if i < len(read)}, file_digest(path)


def load_codebooks(
    path: Path, new: NewTokens, sizes: Mapping[str, int] | None
) -> tuple[dict[str, np.ndarray], str | None, str]:
    """Per level, the codebook vector of each new token's code, in token order, and the
    file's digest (:func:`books_in_file`, :func:`codebook_rows`)."""
    books, digest = books_in_file(path, new.level_names)
    rows, note = codebook_rows(books, new, path, path.name, sizes=sizes)
    return rows, note, digest


def file_digest(path: Path) -> str:
    """The digest (``new_digest``) of a whole (small) codebook file, as reported."""
    h = new_digest()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return digest_text(h)


def level_sizes(new: NewTokens, side: SemanticIds | None) -> dict[str, int] | None:
    """How many codes each level has, where that is known: as a sidecar states it (gti's,
    or the one a framework's map amounts to: the codebooks' sizes when they were matched,
    codes without a token included); levels given in Python have a token per code; levels
    parsed from token names give no size (None)."""
    if new.level_index is None or new.levels_source == "token names":
        return None
    if side is not None and new.levels_source == "sidecar":
        return {lv.name: lv.size for lv in side.levels}
    return {name: int((new.level_index == i).sum()) for i, name in enumerate(new.level_names)}


def codebook_rows(
    books: Mapping[str, np.ndarray],
    new: NewTokens,
    where: object,
    shown: str,
    *,
    sizes: Mapping[str, int] | None,
) -> tuple[dict[str, np.ndarray], str | None]:
    """Per level, ``books[level]``'s row for each new token's code, in token order, and
    a note naming the levels without a codebook. One rule for every route and format: a
    level whose size is known (``sizes``: :func:`level_sizes`) needs a codebook of exactly
    that many codes (those without a token are the level's dead codes, counted from the
    sidecar); a level known only from token names needs one that covers every code seen.
    ``where`` is named in errors, ``shown`` in the note."""
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
        size = None if sizes is None else sizes.get(name)
        if size is not None and book.shape[0] != size:
            raise InputError(
                where,
                f"codebook '{name}' has {book.shape[0]} codes, but level '{name}' has {size}",
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
