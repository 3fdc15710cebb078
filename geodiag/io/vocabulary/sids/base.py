"""The typed results of reading a framework's SID map or codebooks, and the two registries
every dialect module adds itself to (a file plus a line: ``geodiag/io/vocabulary/sids/__init__.py``).

A SID map (:class:`SidMap`) is the item -> code tuple table as the file writes it: item ids
in file order, one code per level (still carrying the file's offset), the de-duplication
digit apart, and how the file spells its tokens when it does. Codebooks
(:class:`SidCodebooks`) are one ``[codes, dim]`` array per level. Both say what was
detected (orientation, padding rows, a de-duplication digit), one sentence each, so the
report can state it. Matching them to each other and to a tokenizer (offsets, level
counts, the token ids) is ``geodiag.io.vocabulary.sid_index``'s job, not a reader's.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.io.vocabulary.sids import files

# How many bytes of a file the dialects' ``sniff`` sees: enough for every magic number and
# the first item of a JSON map.
HEAD_BYTES = 4096


@dataclass(frozen=True)
class Spelling:
    """How a framework spells one code of one level as a token.

    ``kind``: ``"letter"`` (``<a_12>``, LC-Rec), ``"s_letter"`` (``<s_a_12>``, OpenOneRec)
    or ``"flat"`` (``<|sid_300|>``, semantic-ids-llm: one id space, level ``i``'s code ``c``
    at ``i * codebook_size + c``).
    """

    kind: str

    def token(self, level: int, code: int, size: int) -> str:
        """The token of ``code`` at level index ``level`` (``size``: the codebook size, for
        the flat spelling)."""
        if self.kind == "flat":
            return f"<|sid_{level * size + code}|>"
        name = string.ascii_lowercase[level]
        return f"<s_{name}_{code}>" if self.kind == "s_letter" else f"<{name}_{code}>"


SPELLINGS = {kind: Spelling(kind) for kind in ("letter", "s_letter", "flat")}
# The framework's marker tokens: new tokens, but no code of any level.
MARKER_TOKENS = ("<|sid_begin|>", "<|sid_end|>", "<|sid_start|>", "<|rec|>")
_LETTER = re.compile(r"^<(s_)?([a-z])_(\d+)>$")
_FLAT = re.compile(r"^<\|sid_(\d+)\|>$")


def parse_token(token: str) -> tuple[str, int, int | None]:
    """(spelling kind, code or flat id, level index or None for flat) of one SID token;
    ValueError when it is none."""
    if m := _LETTER.match(token):
        kind = "s_letter" if m[1] else "letter"
        return kind, int(m[3]), string.ascii_lowercase.index(m[2])
    if m := _FLAT.match(token):
        return "flat", int(m[1]), None
    raise ValueError(token)


@dataclass(frozen=True)
class SidMap:
    """Item -> code tuple, as one file writes it."""

    path: Path
    dialect: str  # the registry's name of the dialect
    framework: str  # who writes it, for the report
    items: list[str]  # item ids, in file order
    codes: np.ndarray  # (n_items, n_levels) int64, as written (the offset not removed)
    # (n_items,) int64 de-duplication digit, -1 where an item has none; None: no such digit
    dedup: np.ndarray | None = None
    spelling: Spelling | None = None  # how the file spells tokens; None: integers only
    # flat spelling: codes are still flat ids (level * size + code), resolved once the
    # codebook size is known
    flat: bool = False
    detected: list[str] = field(default_factory=list)  # one sentence per decision

    @property
    def n_levels(self) -> int:
        return int(self.codes.shape[1])


@dataclass(frozen=True)
class SidCodebooks:
    """One ``[codes, dim]`` codebook per level, as one file writes them."""

    path: Path
    dialect: str
    framework: str
    books: list[np.ndarray]  # per level, (codes, dim) float64
    detected: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Dialect:
    """One way a framework writes a SID map or its codebooks.

    ``sniff(path, head)``: whether the file is this dialect, from its content (``head``:
    its first :data:`HEAD_BYTES`); ``read(path)``: the typed result; ``usual_names``: the
    glob patterns it is looked for under beside a checkpoint when no flag names a file."""

    name: str
    framework: str
    sniff: Callable[[Path, bytes], bool]
    read: Callable[[Path], object]
    usual_names: tuple[str, ...] = ()
    # Where the format streams: (item ids, (n, levels) codes as written) a block of items
    # at a time, memory flat in the item count (``stream_sid_map``); None: read whole.
    stream: Callable[[Path], Iterator[tuple[list[str], np.ndarray]]] | None = None
    # Whether ``read`` takes the file gzip-compressed (the JSON maps, through
    # ``files.open_text``); any other dialect's file sniffed inside a gzip is refused.
    reads_gzip: bool = False


MAPS: dict[str, Dialect] = {}
CODEBOOKS: dict[str, Dialect] = {}


def register_map(dialect: Dialect) -> Dialect:
    MAPS[dialect.name] = dialect
    return dialect


def register_codebooks(dialect: Dialect) -> Dialect:
    CODEBOOKS[dialect.name] = dialect
    return dialect


def head_of(path: Path) -> bytes:
    """What the dialects sniff: the first :data:`HEAD_BYTES` of what the file holds (a
    gzip file's decompressed, a UTF-8 byte-order mark dropped: ``files.sniffed_head``)."""
    return files.sniffed_head(path, HEAD_BYTES)


def recognise(path: Path, registry: dict[str, Dialect], what: str) -> Dialect:
    """The dialect of ``registry`` that recognises ``path`` by content; InputError naming
    the file and why otherwise: cut short, empty, an encoding not read (``files.problem``),
    a compressed file of a dialect that is read uncompressed only, or every dialect tried."""
    cause = files.problem(path)
    if cause is not None:
        raise InputError(path, cause)
    head = head_of(path)
    for dialect in registry.values():
        if dialect.sniff(path, head):
            if not dialect.reads_gzip and files.is_gzip(path):
                raise InputError(
                    path,
                    f"a gzip-compressed {dialect.framework} file ({dialect.name}): geodiag "
                    "reads JSON maps compressed, this one uncompressed only: gunzip it first",
                )
            return dialect
    names = "; ".join(f"{d.framework} ({d.name})" for d in registry.values())
    raise InputError(path, f"{files.described(path)}not a {what} geodiag reads (tried: {names})")


def codes_matrix(
    path: Path,
    matrix: np.ndarray,
    *,
    dialect: str,
    framework: str,
    items_along_rows: bool | None = None,
    item_ids: list[str] | None = None,
) -> SidMap:
    """A SID map from an integer matrix (GRID's tensor, ETEGRec's list, an ``.npy``):
    orientation (the short side is the levels), padding rows (every code -1: dropped, the
    item ids counting them) and a trailing de-duplication digit detected from the data,
    each stated. ``items_along_rows``: the orientation when the writer fixes it."""
    m = np.asarray(matrix)
    if m.ndim != 2 or m.size == 0 or not np.issubdtype(m.dtype, np.integer):
        raise InputError(path, f"expected a 2-D integer matrix of codes, got shape {m.shape}")
    detected = []
    if items_along_rows is None:
        rows, cols = m.shape
        if rows == cols:
            raise InputError(path, f"a {rows} x {cols} code matrix: cannot tell items from levels")
        items_along_rows = rows > cols
        side = "rows" if items_along_rows else "columns"
        detected.append(
            f"orientation: items along the {side} ({max(rows, cols)} items x "
            f"{min(rows, cols)} digits; the shorter side is the levels)"
        )
    m = (m if items_along_rows else m.T).astype(np.int64)
    ids = item_ids if item_ids is not None else [str(i) for i in range(len(m))]
    padding = (m == -1).all(axis=1)
    if padding.any():
        where = np.flatnonzero(padding)
        detected.append(
            f"padding: {len(where)} row(s) of -1 dropped (row(s) {where[:5].tolist()}); "
            "item ids are row numbers"
        )
        m, ids = m[~padding], [i for i, p in zip(ids, padding, strict=True) if not p]
    if (m < 0).any():
        r, c = np.argwhere(m < 0)[0]
        raise InputError(path, f"item {ids[r]}: negative code {m[r, c]} at digit {c}")
    codes, dedup = m, None
    if m.shape[1] >= 2 and is_dedup_digit(m[:, :-1], m[:, -1]):
        codes, dedup = m[:, :-1], m[:, -1]
        detected.append(
            f"de-duplication digit: the last of {m.shape[1]} digits (it only tells apart "
            "items sharing the other digits; not a codebook level)"
        )
    return SidMap(path, dialect, framework, ids, codes, dedup, None, False, detected)


def tuple_keys(codes: np.ndarray) -> np.ndarray:
    """(n,) one int64 per code tuple (mixed radix over each column's range), equal exactly
    when the tuples are: ``np.unique`` over it is far faster than over rows. Falls back
    to the rows' bytes when the ranges overflow 62 bits."""
    codes = np.asarray(codes, np.int64)
    low = codes.min(axis=0)
    spans = codes.max(axis=0) - low + 1
    if float(np.prod(spans.astype(np.float64))) >= 2.0**62:
        rows = np.ascontiguousarray(codes)
        _, inverse = np.unique(
            rows.view(np.dtype((np.void, 8 * codes.shape[1]))), return_inverse=True
        )
        return inverse.reshape(-1).astype(np.int64)
    key = np.zeros(len(codes), np.int64)
    for col, span in zip((codes - low).T, spans.tolist(), strict=True):
        key = key * span + col
    return key


def is_dedup_digit(codes: np.ndarray, last: np.ndarray) -> bool:
    """Whether ``last`` is a de-duplication digit over ``codes``: it makes every tuple
    distinct and never exceeds the size of the largest group of items sharing ``codes``
    (a counter within each group, from 0 or 1), where a codebook level would range wide."""
    if not len(codes):
        return False
    _, counts = np.unique(tuple_keys(codes), return_counts=True)
    full = np.sort(tuple_keys(np.column_stack([codes, last])))
    if (full[1:] == full[:-1]).any():  # sorted, not np.unique: its hash route is slow here
        return False
    return int(last.max()) <= int(counts.max())
