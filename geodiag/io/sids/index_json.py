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
from geodiag.io.sids.base import SPELLINGS, Dialect, SidMap, parse_token, register_map

FRAMEWORK = "LC-Rec / LETTER / MiniOneRec"
BLOCK = 1 << 20  # characters read at a time
_ENTRY = re.compile(r'"((?:[^"\\]|\\.)*)"\s*:\s*\[([^\]]*)\]')
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
_PUNCTUATION = " \t\r\n,{}"


def sniff(path: Path, head: bytes) -> bool:
    """A JSON object whose first value is a list of SID tokens."""
    text = head.lstrip()
    if not text.startswith(b"{"):
        return False
    at = text.find(b"[")
    return at > 0 and b"<" in text[at : at + 64] and b":" in text[:at]


def _entries(path: Path) -> Iterator[tuple[list[str], list[list[str]]]]:
    """(item ids, their token lists) per block of the file."""
    done, buf = 0, ""
    try:
        with open(path, encoding="utf-8") as f:
            while True:
                block = f.read(BLOCK)
                buf += block
                keys, lists, pos = [], [], 0
                for m in _ENTRY.finditer(buf):
                    if buf[pos : m.start()].strip(_PUNCTUATION):
                        raise InputError(
                            path, f"not an item -> token list object at character {done + pos}"
                        )
                    key = m[1] if "\\" not in m[1] else json.loads(f'"{m[1]}"')
                    keys.append(key)
                    lists.append(_STRING.findall(m[2]))
                    pos = m.end()
                buf, done = buf[pos:], done + pos
                if keys:
                    yield keys, lists
                if not block:
                    break
    except UnicodeDecodeError as e:
        raise InputError(path, f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    if buf.strip(_PUNCTUATION):
        raise InputError(path, f"not an item -> token list object at character {done}")


class _Reader:
    """Token lists -> codes, the spelling and the ragged de-duplication level checked
    across blocks."""

    def __init__(self, path: Path) -> None:
        self.path, self.kind, self.n_levels = path, None, None
        self.n_dedup = 0

    def codes(self, keys: list[str], lists: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
        n_levels = self.n_levels or min(len(v) for v in lists)
        self.n_levels = n_levels
        codes = np.empty((len(keys), n_levels), np.int64)
        dedup = np.full(len(keys), -1, np.int64)
        for r, (item, tokens) in enumerate(zip(keys, lists, strict=True)):
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
