"""The seam between a framework's SID files and the drop-in grounding: one typed value,
:class:`IndexTokens`, built by :func:`read_index` from geodiag's readers of the frameworks'
SID maps and codebooks (``geodiag.io.vocabulary.sids``: one parser per format, in one place; gti never
parses a SID map itself).

An index is what the framework's own training script sees: item -> the item's token strings
in order (``["<a_12>", "<b_3>", "<c_44>"]``), spelled as the framework spells them. The new
vocabulary is exactly the set of those strings, added in sorted order (LC-Rec's
``get_new_tokens`` adds ``sorted(set(...))``; whatever order the framework uses, its own
``add_tokens`` then finds every one present and adds none).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class IndexTokens:
    """A SID map as token strings, and what geodiag read about it."""

    path: Path
    items: dict[str, tuple[str, ...]]  # item id -> its tokens, in order
    # token -> (level index, code) where the spelling says; markers and unparsed: absent
    codes: dict[str, tuple[int, int]] = field(default_factory=dict)
    # one (codes, dim) codebook per level, when --codebooks was given
    codebooks: list[np.ndarray] | None = None
    codebooks_path: Path | None = None
    framework: str = ""
    offset: int | None = None  # --sid-offset as given (None: detected)
    detected: tuple[str, ...] = ()  # what the reader decided, one sentence each

    @property
    def tokens(self) -> list[str]:
        """The new vocabulary, sorted (the order it is added in)."""
        return sorted({t for toks in self.items.values() for t in toks})

    def slots(self, items: list[str]) -> list[tuple[int, ...]]:
        """Each item's tokens as positions in :attr:`tokens`."""
        position = {t: k for k, t in enumerate(self.tokens)}
        return [tuple(position[t] for t in self.items[i]) for i in items]

    def sid_string(self, item: str) -> str:
        return "".join(self.items[item])

    def levels(self, token_ids: dict[str, int]) -> dict[str, list[int]]:
        """geodiag's ``levels`` (level name -> token ids in code order) over the codes the
        index uses; the matching codebook rows are :meth:`level_books`."""
        out: dict[str, list[int]] = {}
        for token, (level, _code) in sorted(self.codes.items(), key=lambda kv: kv[1]):
            out.setdefault(level_name(level), []).append(token_ids[token])
        return out

    def level_books(self) -> dict[str, np.ndarray] | None:
        """The codebook rows of the codes the index uses, per level (None: no codebooks)."""
        if self.codebooks is None:
            return None
        used: dict[int, list[int]] = {}
        for level, code in sorted(self.codes.values()):
            used.setdefault(level, []).append(code)
        return {
            level_name(level): self.codebooks[level][codes]
            for level, codes in used.items()
            if level < len(self.codebooks)
        }

    def sha256(self) -> str:
        """Digest of the index file (and the codebooks file), for resume fingerprints."""
        h = hashlib.sha256(self.path.read_bytes())
        if self.codebooks_path is not None:
            h.update(self.codebooks_path.read_bytes())
        return h.hexdigest()


def level_name(level: int) -> str:
    """The name of SID position ``level``: a, b, c, ... (geodiag's level names)."""
    return "abcdefghijklmnopqrstuvwxyz"[level]


def read_index(path: Path, codebooks: Path | None = None, offset: int | None = None) -> IndexTokens:
    """An index file (and its codebooks) through geodiag's SID readers (``geodiag.io.vocabulary.sids``,
    matched by ``geodiag.io.vocabulary.sid_index.match_sids``): each item's tokens as the framework
    spells them, the de-duplication token last where the item has one (MiniOneRec's
    ``<d_k>``). ``offset``: what the codes start from, when the data cannot tell."""
    from geodiag.errors import InputError
    from geodiag.io.vocabulary.sid_index import match_sids
    from geodiag.io.vocabulary.sids import read_codebooks, read_sid_map

    m = read_sid_map(path)
    books = read_codebooks(codebooks) if codebooks is not None else None
    found = match_sids(m, books, None, offset)
    levels = found.sids.levels
    n = len(levels)
    dedup = m.dedup if m.dedup is not None else (m.codes[:, n] if m.codes.shape[1] > n else None)
    if dedup is not None and (m.spelling is None or m.spelling.kind == "flat"):
        raise InputError(path, "a de-duplication digit without a token spelling: no token for it")
    items: dict[str, tuple[str, ...]] = {}
    codes: dict[str, tuple[int, int]] = {}
    for r, (item, row) in enumerate(found.sids.items.items()):
        tokens = [levels[lv].tokens[c] for lv, c in enumerate(row)]
        codes.update({t: (lv, c) for lv, (t, c) in enumerate(zip(tokens, row, strict=True))})
        if dedup is not None and dedup[r] >= 0:
            tokens.append(m.spelling.token(n, int(dedup[r]), 0))  # type: ignore[union-attr]
        items[item] = tuple(tokens)
    return IndexTokens(
        path=Path(path),
        items=items,
        codes=codes,
        codebooks=[found.codebooks[lv.name] for lv in levels] if found.codebooks else None,
        codebooks_path=found.codebooks_path,
        framework=m.framework,
        offset=offset,
        detected=tuple(found.notes),
    )
