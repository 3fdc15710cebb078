"""The seam between a framework's SID files and the drop-in grounding: one typed value,
:class:`IndexTokens`, built by :func:`read_index` from geodiag's readers of the frameworks'
SID maps and codebooks (``geodiag.io.sids``: one parser per format, in one place; gti never
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
            out.setdefault(_name(level), []).append(token_ids[token])
        return out

    def level_books(self) -> dict[str, np.ndarray] | None:
        """The codebook rows of the codes the index uses, per level (None: no codebooks)."""
        if self.codebooks is None:
            return None
        used: dict[int, list[int]] = {}
        for level, code in sorted(self.codes.values()):
            used.setdefault(level, []).append(code)
        return {
            _name(level): self.codebooks[level][codes]
            for level, codes in used.items()
            if level < len(self.codebooks)
        }

    def sha256(self) -> str:
        """Digest of the index file (and the codebooks file), for resume fingerprints."""
        h = hashlib.sha256(self.path.read_bytes())
        if self.codebooks_path is not None:
            h.update(self.codebooks_path.read_bytes())
        return h.hexdigest()


def _name(level: int) -> str:
    return "abcdefghijklmnopqrstuvwxyz"[level]


def read_index(path: Path, codebooks: Path | None = None) -> IndexTokens:
    """An index file (and its codebooks) through geodiag's SID readers."""
    from geodiag.errors import InputError

    raise InputError(path, "reading a framework's SID map needs geodiag.io.sids (issue 40)")
