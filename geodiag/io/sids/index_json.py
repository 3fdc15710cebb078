"""LC-Rec / LETTER / MiniOneRec ``{dataset}.index.json``: ``{"<item>": ["<a_12>", "<b_3>",
"<c_44>"], ...}``, item keys strings of integers (``json.dump`` of int keys), one token per
level. MiniOneRec's ``*_plus`` and constrained indices add 1 to every code and append a
``<d_k>`` only to the items that collide (k = 1, 2, ... within the group): a ragged last
level, read as a de-duplication digit. Also read: the ``<s_a_12>`` and flat
``<|sid_300|>`` spellings (level = position in the item's list)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.io.sids.base import SPELLINGS, Dialect, SidMap, parse_token, register_map
from geodiag.jsonio import read_json

FRAMEWORK = "LC-Rec / LETTER / MiniOneRec"


def sniff(path: Path, head: bytes) -> bool:
    """A JSON object whose first value is a list of SID tokens."""
    text = head.lstrip()
    if not text.startswith(b"{"):
        return False
    at = text.find(b"[")
    return at > 0 and b"<" in text[at : at + 64] and b":" in text[:at]


def read(path: Path) -> SidMap:
    data = read_json(path)
    if not isinstance(data, dict) or not data:
        raise InputError(path, "expected a non-empty JSON object item -> list of SID tokens")
    items = list(data)
    lengths = {len(v) if isinstance(v, list) else -1 for v in data.values()}
    if -1 in lengths or 0 in lengths:
        bad = next(k for k, v in data.items() if not isinstance(v, list) or not v)
        raise InputError(path, f"item {bad!r}: expected a non-empty list of SID tokens")
    n_levels = min(lengths)
    if max(lengths) > n_levels + 1:
        raise InputError(
            path, f"items hold between {n_levels} and {max(lengths)} tokens: levels unclear"
        )
    codes = np.empty((len(items), n_levels), np.int64)
    dedup = np.full(len(items), -1, np.int64) if max(lengths) > n_levels else None
    kinds = set()
    for r, item in enumerate(items):
        for pos, token in enumerate(data[item]):
            try:
                kind, code, level = parse_token(token) if isinstance(token, str) else ("", 0, 0)
            except ValueError:
                kind = ""
            if not kind or (level is not None and level != pos):
                raise InputError(
                    path, f"item {item!r}: {token!r} is not a SID token of level {pos}"
                )
            kinds.add(kind)
            if pos < n_levels:
                codes[r, pos] = code
            else:
                dedup[r] = code
    if len(kinds) != 1:
        raise InputError(path, f"mixed token spellings: {', '.join(sorted(kinds))}")
    kind = kinds.pop()
    detected = [f"spelling: {SPELLINGS[kind].token(0, 12, 256)} ({kind}); levels by position"]
    if dedup is not None:
        n = int((dedup >= 0).sum())
        detected.append(
            f"de-duplication digit: a {n_levels + 1}th token on {n} of {len(items)} items "
            "(those colliding on the others; not a codebook level)"
        )
    return SidMap(
        path,
        "index.json",
        FRAMEWORK,
        items,
        codes,
        dedup,
        SPELLINGS[kind],
        kind == "flat",
        detected,
    )


DIALECT = register_map(Dialect("index.json", FRAMEWORK, sniff, read, usual_names=("*.index.json",)))
