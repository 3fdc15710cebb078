"""LC-Rec / LETTER / MiniOneRec ``{dataset}.index.json``: ``{"<item>": ["<a_12>", "<b_3>",
"<c_44>"], ...}``, item keys strings of integers (``json.dump`` of int keys), one token per
level. MiniOneRec's ``*_plus`` and constrained indices add 1 to every code and append a
``<d_k>`` only to the items that collide (k = 1, 2, ... within the group): a ragged last
level, read as a de-duplication digit. Also read: the ``<s_a_12>`` and flat
``<|sid_300|>`` spellings (level = position in the item's list), and lists of integers
(MiniOneRec's ``rqkmeans_faiss.py`` with ``use_prefix=False``: no spelling, the
tokenizer's is taken as for an integer matrix).

Read streaming (:func:`stream`): the file by blocks of :data:`BLOCK` characters, each
``"item": [tokens]`` entry matched as it completes and the text between entries checked to
be one object's punctuation (``{``, a comma between entries, ``}`` last), so a
10-million-item index never becomes one dict, and one cut short by an interrupted copy
is refused saying where it ends instead of read as its first items. A UTF-8 byte-order
mark and gzip (``*.index.json.gz``) are read through (``files.open_text``)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.io.vocabulary.sids import files
from geodiag.io.vocabulary.sids.base import (
    SPELLINGS,
    Dialect,
    SidMap,
    codes_matrix,
    parse_token,
    register_map,
)

FRAMEWORK = "LC-Rec / LETTER / MiniOneRec"
DIALECT_NAME = "index.json"
INTEGER_CODES = (
    "codes written as integers, not tokens (MiniOneRec's rqkmeans_faiss.py with "
    "use_prefix=False): level = position in the item's list, tokens as the tokenizer spells them"
)
BLOCK = 1 << 20  # characters read at a time
_ENTRY = re.compile(r'"([^"\\]*(?:\\.[^"\\]*)*)"\s*:\s*\[([^\]]*)\]')
_PUNCTUATION = " \t\r\n,{}"


def sniff(path: Path, head: bytes) -> bool:
    """A JSON object whose first value is a list of SID tokens, or of integers (MiniOneRec's
    ``rqkmeans_faiss.py`` with ``use_prefix=False``)."""
    text = head.lstrip()
    if not text.startswith(b"{"):
        return False
    at = text.find(b"[")
    if at <= 0 or b":" not in text[:at]:
        return False
    first = text[at + 1 : at + 64].lstrip()
    return b"<" in text[at : at + 64] or first[:1].isdigit()


# The object's skeleton: "{", each entry as ENTRY, "," between, "}". Two neighbours that
# no JSON object has (an entry after an entry with no comma, a comma before "}", anything
# after the closing "}"), each with what it means; START stands before the first character.
ENTRY, START = "\0", "^"
_WHITESPACE = str.maketrans("", "", " \t\r\n")
_BAD_PAIRS = {
    **{START + c: "does not start with '{'" for c in ENTRY + ",}"},
    **{a + b: "two entries without a comma between them" for a, b in [(ENTRY, ENTRY)]},
    **{a + b: "a comma out of place" for a in "{,}" for b in ","},
    **{a + b: "a comma before the closing '}'" for a in "," for b in "}"},
    **{a + b: "a second '{'" for a in ENTRY + ",{}" for b in "{"},
    **{"}" + b: "text after the closing '}'" for b in ENTRY + "}"},
}


class _Skeleton:
    """The object's punctuation checked as blocks arrive: the last character seen, the
    last item read, and how many."""

    def __init__(self, path: Path) -> None:
        self.path, self.last, self.item, self.n_items = path, START, None, 0

    def take(self, skeleton: str, keys: list[str]) -> None:
        text = self.last + skeleton
        for pair, meaning in _BAD_PAIRS.items():
            at = text.find(pair)
            if at >= 0:
                before = text[1 : at + 1].count(ENTRY)  # this block's entries before it
                item = keys[before - 1] if before else self.item
                where = f"after item {item!r}" if item is not None else "at its start"
                raise InputError(self.path, f"not one JSON object: {meaning} ({where})")
        self.last = text[-1]
        if keys:
            self.item, self.n_items = keys[-1], self.n_items + len(keys)

    def end(self, at: int, inside: bool) -> None:
        """The file ended at character ``at``: complete only after its closing "}"."""
        if self.last == "}" and not inside:
            return
        after = f"after item {self.item!r} ({self.n_items:,} items complete)"
        where = f"inside the entry {after}" if inside else f"{after}, before its closing '}}'"
        if self.item is None:
            where = "before its first item"
        raise InputError(self.path, f"ends at character {at:,} {where}: {files.INTERRUPTED}")


def _split(buf: str) -> tuple[list[tuple[str, str]], int, int | None, str]:
    """(the complete ``(item, token list text)`` entries at the head of ``buf``, where
    they end, the character of the first text between entries that is not JSON
    punctuation or None, the skeleton up to there). At C speed up to the last ``]``;
    entry by entry if that fails (a ``]`` inside an item id)."""
    end = buf.rfind("]") + 1
    head = buf[:end]
    pairs = _ENTRY.findall(head)
    rest = _ENTRY.sub(ENTRY, head)
    if not rest.strip(_PUNCTUATION + ENTRY):
        return pairs, end, None, rest.translate(_WHITESPACE)
    pairs, pos, skeleton = [], 0, []
    for m in _ENTRY.finditer(buf):
        between = buf[pos : m.start()]
        if between.strip(_PUNCTUATION):
            return pairs, pos, pos, "".join(skeleton)
        skeleton.append(between.translate(_WHITESPACE) + ENTRY)
        pairs.append((m[1], m[2]))
        pos = m.end()
    return pairs, pos, None, "".join(skeleton)


def _entries(path: Path) -> Iterator[tuple[list[str], list[str]]]:
    """(item ids, the text inside each one's token list) per block of the file; the
    object's punctuation checked, and its end (a file cut short is refused saying where)."""
    done, buf = 0, ""
    shape = _Skeleton(path)
    with files.reading(path), files.open_text(path) as f:
        while True:
            block = f.read(BLOCK)
            buf += block
            pairs, pos, bad, skeleton = _split(buf)
            keys = [k if "\\" not in k else json.loads(f'"{k}"') for k, _ in pairs]
            if bad is not None:
                raise InputError(
                    path, f"not an item -> token list object at character {done + bad}"
                )
            shape.take(skeleton, keys)
            buf, done = buf[pos:], done + pos
            if pairs:
                yield keys, [inner for _, inner in pairs]
            if not block:
                break
    tail = buf.strip(_PUNCTUATION)
    shape.take(buf.translate(_WHITESPACE) if not tail else "", [])
    shape.end(done + len(buf), inside=bool(tail))


# A block's tokens at C speed: their levels' letters and their codes (or flat ids) pulled
# out in order; every quote of the block must belong to one of them (else the slow path).
_ANY_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_LETTER = re.compile(r'"<(?:s_)?([a-z])_\d+>"')
_LETTER_CODE = re.compile(r'"<(?:s_)?[a-z]_(\d+)>"')
_FLAT_TOKEN = re.compile(r'"<\|sid_(\d+)\|>"')


class _Reader:
    """Token lists -> codes, the spelling and the ragged de-duplication level checked
    across blocks."""

    def __init__(self, path: Path) -> None:
        self.path, self.kind, self.n_levels = path, None, None
        self.n_dedup = 0

    def codes(self, keys: list[str], inners: list[str]) -> tuple[np.ndarray, np.ndarray]:
        if self.kind is None and '"' not in inners[0]:
            self.kind = "int"
        if self.kind == "int":
            return self._integers(keys, inners), np.full(len(keys), -1, np.int64)
        counts = np.array([inner.count('"') for inner in inners], np.int64)
        n_levels = self.n_levels or int(counts.min()) // 2
        self.n_levels = n_levels
        text = "".join(inners)
        flat = "<|sid_" in text
        kind = "flat" if flat else ("s_letter" if '"<s_' in text else "letter")
        found = (_FLAT_TOKEN if flat else _LETTER_CODE).findall(text)
        counts //= 2
        n_prefixed = text.count('"<s_')
        ok = (
            n_levels >= 1
            and ((counts >= n_levels) & (counts <= n_levels + 1)).all()
            and 2 * len(found) == text.count('"')
            and n_prefixed in (0, len(found))
            and kind == (self.kind or kind)
        )
        if ok:
            position = np.arange(len(found)) - np.repeat(np.cumsum(counts) - counts, counts)
            values = np.array(found, dtype=np.int64)
            if not flat:
                letters = "".join(_LETTER.findall(text)).encode()
                levels = np.frombuffer(letters, np.uint8).astype(np.int64) - ord("a")
                ok = len(levels) == len(found) and bool((levels == position).all())
        if not ok:  # the slow path names the first bad item and token
            return self._codes_one_by_one(keys, inners, n_levels)
        self.kind = kind
        rows = np.repeat(np.arange(len(keys)), counts)
        codes = np.empty((len(keys), n_levels), np.int64)
        dedup = np.full(len(keys), -1, np.int64)
        semantic = position < n_levels
        codes[rows[semantic], position[semantic]] = values[semantic]
        dedup[rows[~semantic]] = values[~semantic]
        self.n_dedup += int((~semantic).sum())
        return codes, dedup

    def _integers(self, keys: list[str], inners: list[str]) -> np.ndarray:
        """Lists of integer codes, one per level (no spelling in the file); the first item
        that holds anything else, or another count, named."""
        counts = np.array([inner.count(",") + 1 for inner in inners], np.int64)
        n_levels = self.n_levels or int(counts[0])
        self.n_levels = n_levels
        try:
            if (counts == n_levels).all():
                values = np.array(",".join(inners).split(","), dtype=np.int64)
                return values.reshape(len(keys), n_levels)
        except ValueError:
            pass
        for item, inner in zip(keys, inners, strict=True):
            try:
                row = json.loads(f"[{inner}]")
            except ValueError:
                row = None
            if not isinstance(row, list) or not all(type(v) is int for v in row):
                raise InputError(
                    self.path,
                    f"item {item!r}: [{inner.strip()[:40]}] is not a list of integer codes",
                )
            if len(row) != n_levels:
                raise InputError(
                    self.path, f"item {item!r}: {len(row)} codes where items hold {n_levels}"
                )
        raise AssertionError("unreachable: every item was a list of n_levels integers")

    def _codes_one_by_one(
        self, keys: list[str], inners: list[str], n_levels: int
    ) -> tuple[np.ndarray, np.ndarray]:
        codes = np.empty((len(keys), n_levels), np.int64)
        dedup = np.full(len(keys), -1, np.int64)
        for r, (item, inner) in enumerate(zip(keys, inners, strict=True)):
            tokens = [json.loads(t) for t in _ANY_STRING.findall(inner)]
            if not n_levels <= len(tokens) <= n_levels + 1:
                raise InputError(
                    self.path, f"item {item!r}: {len(tokens)} tokens where items hold {n_levels}"
                )
            for pos, token in enumerate(tokens):
                try:
                    kind, code, level = parse_token(token)
                except ValueError:
                    kind, code, level = "", 0, None
                if not kind or (level is not None and level != pos) or kind != (self.kind or kind):
                    raise InputError(
                        self.path, f"item {item!r}: {token!r} is not a SID token of level {pos}"
                    )
                self.kind = kind
                if pos < n_levels:
                    codes[r, pos] = code
                else:
                    dedup[r] = code
        self.n_dedup += int((dedup >= 0).sum())
        return codes, dedup


def stream(path: Path) -> Iterator[tuple[list[str], np.ndarray]]:
    reader = _Reader(path)
    for keys, lists in _entries(path):
        yield keys, reader.codes(keys, lists)[0]


def read(path: Path) -> SidMap:
    reader = _Reader(path)
    items: list[str] = []
    blocks, dedups = [], []
    for keys, lists in _entries(path):
        codes, dedup = reader.codes(keys, lists)
        items += keys
        blocks.append(codes)
        dedups.append(dedup)
    if not items:
        raise InputError(path, "expected a non-empty JSON object item -> list of SID tokens")
    codes, dedup = np.concatenate(blocks), np.concatenate(dedups)
    kind = reader.kind
    if kind == "int":  # no spelling: the tokenizer's, as for an integer matrix
        m = codes_matrix(
            path,
            codes,
            dialect=DIALECT_NAME,
            framework=FRAMEWORK,
            items_along_rows=True,
            item_ids=items,
        )
        m.detected.insert(0, INTEGER_CODES)
        return m
    detected = [f"spelling: {SPELLINGS[kind].token(0, 12, 256)} ({kind}); levels by position"]
    if reader.n_dedup:
        detected.append(
            f"de-duplication digit: a {reader.n_levels + 1}th token on {reader.n_dedup} of "
            f"{len(items)} items (those colliding on the others; not a codebook level)"
        )
    return SidMap(
        path,
        DIALECT_NAME,
        FRAMEWORK,
        items,
        codes,
        dedup if reader.n_dedup else None,
        SPELLINGS[kind],
        kind == "flat",
        detected,
    )


DIALECT = register_map(
    Dialect(
        DIALECT_NAME,
        FRAMEWORK,
        sniff,
        read,
        usual_names=("*.index.json", "*.index.json.gz"),
        stream=stream,
        reads_gzip=True,
    )
)
