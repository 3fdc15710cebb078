"""A framework's SID map and codebooks (``geodiag.io.vocabulary.sids``) matched to each other and to
the checkpoint's tokenizer, as the sidecar route reads ours: the levels, each code's
token id, the items' code tuples and the codebook of each level. Every figure downstream
(levels, block heatmaps, RSA per level, codebook health, usage severity) then comes from
the same code as for ``semantic_ids.json``.

What is decided here, each stated in :attr:`ForeignSids.notes`:
- the level count: the map's digits against the codebooks' levels (one digit more is a
  de-duplication digit when the data says so; otherwise a mismatch is exit 2);
- the offset: codes written from 1 against 0-based codebooks (MiniOneRec's ``*_plus``
  indices) are aligned (code ``c`` is codebook row ``c - 1``), or refused naming the
  offset when the data cannot tell (``--sid-offset`` then says);
- the spelling of an integer map's tokens: whichever of ``<a_12>``, ``<s_a_12>``,
  ``<|sid_300|>`` the tokenizer holds;
- codes past the codebook, and items whose tokens the tokenizer lacks: exit 2 naming the
  file, the item and the code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.io.vocabulary import sidecar as sidecar_mod
from geodiag.io.vocabulary.sids import SidCodebooks, SidMap
from geodiag.io.vocabulary.sids.base import MARKER_TOKENS, SPELLINGS, Spelling, is_dedup_digit
from geodiag.io.vocabulary.tokenizer import TokenizerInfo

# Codes may start at 0 or at 1 (MiniOneRec's *_plus and constrained indices add 1).
OFFSETS = (0, 1)
# The least share of the checkpoint's SID tokens a map's items may use. A catalog's map
# uses most (the frameworks' committed maps: 73% to 95% of 3 x 256 or 4 x 256 tokens; the
# rest are dead codes); one that uses fewer is a fragment or another catalog's, and every
# token it leaves out would be counted as one nothing feeds (n_untrained would drop).
MIN_MAP_COVERAGE = 0.5


@dataclass
class ForeignSids:
    """The sidecar a framework's files amount to, its codebooks and what was decided."""

    sids: sidecar_mod.SemanticIds
    codebooks: dict[str, np.ndarray]  # level name -> (codes, dim)
    map_path: Path
    codebooks_path: Path | None
    notes: list[str] = field(default_factory=list)


def _token_ids(tok: TokenizerInfo | None) -> dict[str, int]:
    if tok is None:
        return {}
    out = {text: i for i, text in tok.vocab.items()}
    out.update({t.content: t.id for t in tok.added})
    return out


def _levels_against_books(
    m: SidMap, books: SidCodebooks | None, notes: list[str]
) -> tuple[np.ndarray, np.ndarray | None]:
    """(codes with one column per codebook level, the de-duplication digit)."""
    codes, dedup = m.codes, m.dedup
    if books is None:
        return codes, dedup
    n_books = len(books.books)
    if codes.shape[1] == n_books:
        return codes, dedup
    if (
        codes.shape[1] == n_books + 1
        and dedup is None
        and is_dedup_digit(codes[:, :-1], codes[:, -1])
    ):
        notes.append(
            f"{m.path.name}: the last of {codes.shape[1]} digits is past the codebooks' "
            f"{n_books} levels: read as a de-duplication digit"
        )
        return codes[:, :-1], codes[:, -1]
    if codes.shape[1] + 1 == n_books and dedup is not None and not m.spelling:
        notes.append(
            f"{m.path.name}: its last digit is codebook level {n_books - 1}, not a "
            "de-duplication digit (the codebooks have one more level)"
        )
        return np.column_stack([codes, dedup]), None
    raise InputError(
        m.path,
        f"{codes.shape[1]} code levels, but {books.path} holds {n_books} codebooks: the map "
        "and the codebooks disagree",
    )


def _flat_to_levels(
    m: SidMap, codes: np.ndarray, books: SidCodebooks | None, ids: dict[str, int]
) -> tuple[np.ndarray, int]:
    """A flat spelling's ids (``level * size + code``) as per-level codes, and the size."""
    n_levels = codes.shape[1]
    if books is not None:
        sizes = {b.shape[0] for b in books.books}
        if len(sizes) != 1:
            raise InputError(m.path, f"flat ids over codebooks of sizes {sorted(sizes)}")
        size = sizes.pop()
    else:
        n_flat = sum(1 for t in ids if t.startswith("<|sid_") and t[6:-2].isdigit())
        if not n_flat or n_flat % n_levels:
            raise InputError(
                m.path, "flat <|sid_N|> ids need the codebook size: pass --codebooks FILE"
            )
        size = n_flat // n_levels
    out = codes - np.arange(n_levels) * size
    bad = np.argwhere((out < 0) | (out >= size))
    if len(bad):
        r, c = bad[0]
        raise InputError(
            m.path, f"item {m.items[r]}: <|sid_{codes[r, c]}|> is not a code of level {c}"
        )
    return out, size


def _offset(
    m: SidMap,
    codes: np.ndarray,
    sizes: list[int] | None,
    given: int | None,
    notes: list[str],
    ids: dict[str, int],
) -> int:
    """0 or 1: what the file's codes start from, against 0-based codebooks of ``sizes``
    (without codebooks: against the tokenizer, which has no code 0 of a 1-based index)."""
    if given is not None:
        notes.append(f"{m.path.name}: codes start at {given} (--sid-offset)")
        return given
    if (codes == 0).any():
        return 0
    if sizes is None and m.spelling is not None and ids:
        zeros = [m.spelling.token(lv, 0, 0) for lv in range(codes.shape[1])]
        if not any(z in ids for z in zeros):
            notes.append(
                f"{m.path.name}: no code 0 at any level and no {zeros[0]} in the tokenizer: "
                "codes read as starting at 1"
            )
            return 1
    top = codes.max(axis=0)
    if sizes is not None and any(int(t) == s for t, s in zip(top, sizes, strict=True)):
        notes.append(
            f"{m.path.name}: codes run 1..K against 0-based codebooks of K rows (no code 0 "
            "at any level, code K used): aligned, code c is codebook row c - 1"
        )
        return 1
    if sizes is None:
        return 0
    raise InputError(
        m.path,
        "no code 0 at any level and none reaching the codebook size: cannot tell whether "
        "codes start at 0 or at 1 (offset 1, as MiniOneRec's *_plus indices write them); "
        "pass --sid-offset 0 or --sid-offset 1",
    )


def _tokens_in_a_row(
    spelling: Spelling, level: int, offset: int, seen: int, flat_size: int | None, ids: dict
) -> int:
    """How many codes of ``level`` the tokenizer spells, from code 0 on without a gap
    (at least ``seen``): a level's size when no codebook gives it."""
    if flat_size is not None:
        return flat_size
    n = seen
    while spelling.token(level, n + offset, 0) in ids:
        n += 1
    return n


def _spelling(
    m: SidMap, codes: np.ndarray, offset: int, ids: dict[str, int], size: int
) -> Spelling:
    """The map's own spelling, else the one the tokenizer holds for the first item."""
    if m.spelling is not None:
        return m.spelling
    for s in SPELLINGS.values():
        row = codes[0]
        if all(s.token(lv, int(c), size) in ids for lv, c in enumerate(row)):
            return s
    return SPELLINGS["letter"]


def match_sids(
    m: SidMap,
    books: SidCodebooks | None,
    tok: TokenizerInfo | None,
    offset: int | None = None,
) -> ForeignSids:
    """The sidecar ``m`` and ``books`` amount to over ``tok``'s token ids (module docstring)."""
    notes = [f"SID map: {m.path.name} ({m.framework}, {len(m.items)} items)"]
    notes += [f"{m.path.name}: {d}" for d in m.detected]
    if books is not None:
        notes.append(f"codebooks: {books.path.name} ({books.framework})")
        notes += [f"{books.path.name}: {d}" for d in books.detected]
    ids = _token_ids(tok)
    codes, dedup = _levels_against_books(m, books, notes)
    flat_size = None
    if m.flat:
        codes, flat_size = _flat_to_levels(m, codes, books, ids)
    n_levels = codes.shape[1]
    sizes = [b.shape[0] for b in books.books] if books is not None else None
    offset = _offset(m, codes, sizes, offset, notes, ids) if not m.flat else 0
    zero = codes - offset
    if sizes is None:  # no codebooks: the codes the tokenizer spells, at least those seen
        seen = [int(zero[:, lv].max()) + 1 for lv in range(n_levels)]
        spelling = _spelling(m, codes, offset, ids, flat_size or seen[0])
        sizes = [
            _tokens_in_a_row(spelling, lv, offset, n, flat_size, ids) for lv, n in enumerate(seen)
        ]
    for lv, size in enumerate(sizes):
        bad = np.flatnonzero(zero[:, lv] >= size)
        if len(bad):
            where = books.path if books is not None else m.path
            raise InputError(
                m.path,
                f"item {m.items[bad[0]]}: code {codes[bad[0], lv]} at level {lv} is beyond "
                f"the codebook of {size} codes ({where}; codes start at {offset})",
            )
    size0 = flat_size or sizes[0]
    spelling = _spelling(m, codes, offset, ids, size0)
    shown = spelling.token(0, 12, flat_size or size0) + (
        f" (level i, code c: <|sid_{{i * {flat_size or size0} + c}}|>)"
        if spelling.kind == "flat"
        else ""
    )
    whose = "as the file spells them" if m.spelling is not None else "as the tokenizer holds them"
    notes.append(f"{m.path.name}: tokens spelled {shown}, {whose}")
    levels = []
    for lv, size in enumerate(sizes):
        texts = [
            spelling.token(lv, c + (0 if m.flat else offset), flat_size or size)
            for c in range(size)
        ]
        token_ids = [ids.get(t, -1) for t in texts]
        levels.append(sidecar_mod.Level(sidecar_mod.level_name(lv), size, token_ids, texts))
    if tok is not None:
        _check_tokens(m, zero, levels, tok)
        notes.append(_check_coverage(m, zero, levels, tok))
        notes += _extra_tokens(m, dedup, levels, ids)
    items = {item: [int(c) for c in row] for item, row in zip(m.items, zero.tolist(), strict=True)}
    if len(items) != len(m.items):
        notes.append(f"{m.path.name}: {len(m.items) - len(items)} repeated item ids (last kept)")
    provenance = {"sid_map": str(m.path), "sid_map_format": m.framework}
    if books is not None:
        provenance |= {"codebooks": str(books.path), "codebooks_format": books.framework}
    side = sidecar_mod.SemanticIds(None, levels, items, provenance)
    named = {sidecar_mod.level_name(i): b for i, b in enumerate(books.books)} if books else {}
    return ForeignSids(side, named, m.path, books.path if books else None, notes)


def _check_tokens(
    m: SidMap, zero: np.ndarray, levels: list[sidecar_mod.Level], tok: TokenizerInfo
) -> None:
    """Exit 2 when items' SIDs name tokens the tokenizer lacks: how many, and the first."""
    lacking_items = np.zeros(len(zero), bool)
    first = None
    for lv, level in enumerate(levels):
        lacking = np.array([t < 0 for t in level.token_ids])
        used = lacking[zero[:, lv]]
        if used.any() and first is None:
            first = (lv, int(np.flatnonzero(used)[0]))
        lacking_items |= used
    if first is not None:
        lv, r = first
        code, level = int(zero[r, lv]), levels[lv]
        raise InputError(
            m.path,
            f"{int(lacking_items.sum()):,} of its {len(zero):,} items name SID tokens "
            f"{tok.path.name} lacks, e.g. item {m.items[r]}: code {code} of level "
            f"'{level.name}' is token {level.tokens[code]!r}, which {tok.path.name} lacks",
        )
    if all(t < 0 for lv in levels for t in lv.token_ids):
        raise InputError(m.path, f"none of its tokens is in {tok.path.name}")


def _check_coverage(
    m: SidMap, zero: np.ndarray, levels: list[sidecar_mod.Level], tok: TokenizerInfo
) -> str:
    """The note of how many of the checkpoint's SID tokens the map's items use; exit 2
    below :data:`MIN_MAP_COVERAGE`, with the counts and what to pass."""
    held = sum(t >= 0 for level in levels for t in level.token_ids)
    used = sum(len(np.unique(zero[:, lv])) for lv in range(len(levels)))
    counts = (
        f"its {len(zero):,} items use {used:,} of the {held:,} SID tokens {tok.path.name} "
        f"holds ({used / held:.1%})"
    )
    if used < MIN_MAP_COVERAGE * held:
        raise InputError(
            m.path,
            f"{counts}: a map of the checkpoint's catalog uses most of them (geodiag takes "
            f"one that uses at least {MIN_MAP_COVERAGE:.0%}), and the {held - used:,} it "
            "leaves out would be counted as tokens nothing feeds. Pass the SID map of the "
            "whole catalog the checkpoint was trained on (--sids FILE), or leave --sids out "
            "where the checkpoint's own semantic_ids.json describes it",
        )
    return f"{m.path.name}: {counts}"


def _extra_tokens(
    m: SidMap, dedup: np.ndarray | None, levels: list[sidecar_mod.Level], ids: dict[str, int]
) -> list[str]:
    """Notes on the new tokens that are no code: markers, de-duplication tokens, dead codes
    without a token."""
    notes = []
    markers = [t for t in MARKER_TOKENS if t in ids]
    if markers:
        notes.append(f"marker tokens {', '.join(markers)}: new tokens, no SID level")
    if dedup is not None and m.spelling is not None and m.spelling.kind != "flat":
        digits = sorted({int(d) for d in dedup if d >= 0})
        texts = [m.spelling.token(len(levels), d, 0) for d in digits]
        missing = [t for t in texts if t not in ids]
        if missing:
            r = next(
                i
                for i, d in enumerate(dedup)
                if m.spelling.token(len(levels), int(d), 0) in missing
            )
            raise InputError(
                m.path,
                f"item {m.items[r]}: de-duplication token {missing[0]!r} is not in the tokenizer",
            )
        notes.append(
            f"de-duplication tokens {texts[0]}..{texts[-1]} ({len(texts)}): new tokens, no "
            "codebook level (not measured as a SID level)"
        )
    absent = sum(t < 0 for lv in levels for t in lv.token_ids)
    if absent:
        notes.append(f"{absent} codes no item uses have no token in the tokenizer (dead codes)")
    return notes


def open_foreign(
    sids: Path | None,
    codebooks: Path | None,
    offset: int | None,
    roots: list[Path],
    tok: TokenizerInfo | None,
) -> ForeignSids | None:
    """``--sids`` (else a map beside the weights under a framework's usual name) and its
    codebooks (``--codebooks``, else ``codebooks.safetensors`` or a framework's beside the
    weights), matched; None when no map is given or found."""
    from geodiag.io.vocabulary.sids import (
        CODEBOOKS,
        MAPS,
        find_beside,
        read_codebooks,
        read_sid_map,
    )

    map_path = sids if sids is not None else find_beside(roots, MAPS)
    if map_path is None:
        return None
    if not map_path.is_file():
        raise InputError("--sids", f"{map_path}: no such file")
    m = read_sid_map(map_path)
    book_path = codebooks
    if book_path is None:  # ours beside the weights first, else a framework's
        ours = [r / sidecar_mod.CODEBOOKS_FILENAME for r in roots]
        book_path = next((p for p in ours if p.is_file()), None) or find_beside(roots, CODEBOOKS)
    # every codebook file (ours too) is matched with the map, so a level's size is its
    # codebook's and codes without a token count as dead codes
    books = read_codebooks(book_path) if book_path is not None else None
    found = match_sids(m, books, tok, offset)
    if sids is None:
        found.notes.insert(0, f"SID map found beside the weights: {map_path.name}")
    return found


def is_ours(path: Path) -> bool:
    """A safetensors file (our ``codebooks.safetensors``): by name or by its header."""
    if path.suffix == ".safetensors":
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(9)
    except OSError:
        return False
    return len(head) == 9 and head[8:9] == b"{"


class _Vocabulary:
    """A transformers tokenizer (anything with ``get_vocab()``) as the little of
    :class:`~geodiag.io.vocabulary.tokenizer.TokenizerInfo` that matching needs."""

    def __init__(self, tokenizer: object) -> None:
        self.vocab = {int(i): str(t) for t, i in tokenizer.get_vocab().items()}
        self.added: list = []
        self.path = Path(getattr(tokenizer, "name_or_path", "") or "the tokenizer")


def read_foreign(
    sids: str | Path,
    codebooks: str | Path | None = None,
    tokenizer: object = None,
    offset: int | None = None,
) -> ForeignSids:
    """A framework's SID map (and codebooks) matched to ``tokenizer``: a checkpoint folder
    or ``tokenizer.json`` path, a :class:`TokenizerInfo`, or a transformers tokenizer; None
    leaves the token ids unknown (-1). For the API and the Trainer callback, which take the
    result's ``sids`` as ``levels`` and its ``codebooks``."""
    from geodiag.io.vocabulary.sids import read_codebooks, read_sid_map
    from geodiag.io.vocabulary.tokenizer import load_tokenizer_in

    tok = tokenizer
    if isinstance(tok, str | Path):
        folder = Path(tok) if Path(tok).is_dir() else Path(tok).parent
        tok = load_tokenizer_in(lambda name: folder / name)
        if tok is None:
            raise InputError(tokenizer, "no tokenizer.json to name the SID tokens")
    elif tok is not None and not isinstance(tok, TokenizerInfo) and hasattr(tok, "get_vocab"):
        tok = _Vocabulary(tok)
    books = None if codebooks is None else read_codebooks(codebooks)
    return match_sids(read_sid_map(sids), books, tok, offset)
