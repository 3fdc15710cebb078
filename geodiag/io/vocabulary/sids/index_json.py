"""LC-Rec / LETTER / MiniOneRec ``{dataset}.index.json``: ``{"<item>": ["<a_12>", "<b_3>",
"<c_44>"], ...}``, item keys strings of integers (``json.dump`` of int keys), one token per
level. MiniOneRec's ``*_plus`` and constrained indices add 1 to every code and append a
``<d_k>`` only to the items that collide (k = 1, 2, ... within the group): a ragged last
level, read as a de-duplication digit. Also read: the ``<s_a_12>`` and flat
``<|sid_300|>`` spellings (level = position in the item's list).

Read streaming (:func:`stream`): the file by blocks of :data:`BLOCK` characters, each
``"item": [tokens]`` entry matched as it completes and the text between entries checked to
be only JSON punctuation, so a 10-million-item index never becomes one dict."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.io.vocabulary.sids.base import SPELLINGS, Dialect, SidMap, parse_token, register_map

FRAMEWORK = "LC-Rec / LETTER / MiniOneRec"
BLOCK = 1 << 20  # characters read at a time
_ENTRY = re.compile(r'"([^"\\]*(?:\\.[^"\\]*)*)"\s*:\s*\[([^\]]*)\]')
_PUNCTUATION = " \t\r\n,{}"


def sniff(path: Path, head: bytes) -> bool:
    """A JSON object whose first value is a list of SID tokens."""
    text = head.lstrip()
    if not text.startswith(b"{"):
        return False
    at = text.find(b"[")
    return at > 0 and b"<" in text[at : at + 64] and b":" in text[:at]


def _split(buf: str) -> tuple[list[tuple[str, str]], int, int | None]:
    """(the complete ``(item, token list text)`` entries at the head of ``buf``, where
    they end, the character of the first text between entries that is not JSON
    punctuation or None). At C speed up to the last ``]``; entry by entry if that fails
    (a ``]`` inside an item id)."""
    end = buf.rfind("]") + 1
    head = buf[:end]
    pairs = _ENTRY.findall(head)
    if not _ENTRY.sub("", head).strip(_PUNCTUATION):
        return pairs, end, None
    pairs, pos = [], 0
    for m in _ENTRY.finditer(buf):
        if buf[pos : m.start()].strip(_PUNCTUATION):
            return pairs, pos, pos
        pairs.append((m[1], m[2]))
        pos = m.end()
    return pairs, pos, None


def _entries(path: Path) -> Iterator[tuple[list[str], list[str]]]:
    """(item ids, the text inside each one's token list) per block of the file."""
    done, buf = 0, ""
    try:
        with open(path, encoding="utf-8") as f:
            while True:
                block = f.read(BLOCK)
                buf += block
                pairs, pos, bad = _split(buf)
                if bad is not None:
                    raise InputError(
                        path, f"not an item -> token list object at character {done + bad}"
                    )
                buf, done = buf[pos:], done + pos
                if pairs:
                    keys = [k if "\\" not in k else json.loads(f'"{k}"') for k, _ in pairs]
                    yield keys, [inner for _, inner in pairs]
                if not block:
                    break
    except UnicodeDecodeError as e:
        raise InputError(path, f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    if buf.strip(_PUNCTUATION):
        raise InputError(path, f"not an item -> token list object at character {done}")


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
    detected = [f"spelling: {SPELLINGS[kind].token(0, 12, 256)} ({kind}); levels by position"]
    if reader.n_dedup:
        detected.append(
            f"de-duplication digit: a {reader.n_levels + 1}th token on {reader.n_dedup} of "
            f"{len(items)} items (those colliding on the others; not a codebook level)"
        )
    return SidMap(
        path,
        "index.json",
        FRAMEWORK,
        items,
        codes,
        dedup if reader.n_dedup else None,
        SPELLINGS[kind],
        kind == "flat",
        detected,
    )


DIALECT = register_map(
    Dialect("index.json", FRAMEWORK, sniff, read, usual_names=("*.index.json",), stream=stream)
)
