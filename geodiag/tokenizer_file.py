"""Token strings and added tokens from ``tokenizer.json``, without loading a tokenizer.

A CI gate should not import transformers to learn that id 49152 is ``<a_0>``:
the JSON already says so.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from geodiag.errors import InputError


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's bytes_to_unicode: printable stand-ins -> raw bytes."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    bs += list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


@dataclass(frozen=True)
class AddedToken:
    id: int
    content: str
    special: bool


@dataclass
class TokenizerInfo:
    path: Path
    vocab: dict[int, str] = field(default_factory=dict)  # id -> raw token string
    added: list[AddedToken] = field(default_factory=list)
    byte_level: bool = False

    def __post_init__(self) -> None:
        self._added_by_id: dict[int, str] | None = None

    def __len__(self) -> int:
        ids = list(self.vocab) + [t.id for t in self.added]
        return max(ids) + 1 if ids else 0

    def token(self, token_id: int) -> str | None:
        """Readable token string: byte-level stand-ins decoded (``Ġthe`` -> `` the``)."""
        if self._added_by_id is None:  # built on first use: `added` is filled after init
            self._added_by_id = {t.id: t.content for t in self.added}
        if token_id in self._added_by_id:
            return self._added_by_id[token_id]
        raw = self.vocab.get(token_id)
        if raw is None or not self.byte_level:
            return raw
        table = _byte_decoder()
        if not all(ch in table for ch in raw):
            return raw
        return bytes(table[ch] for ch in raw).decode("utf-8", errors="replace")

    def added_non_special(self) -> list[AddedToken]:
        return sorted((t for t in self.added if not t.special), key=lambda t: t.id)


_MERGES_KEY = re.compile(r'"merges"\s*:\s*\[')
_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]]')
# The whole merges array in one match, in C: strings ("a b") or pairs (["a", "b"]).
# Strings as an unrolled loop and possessive quantifiers: no backtracking, 30 ms for
# SmolLM2's 49k merges where walking them token by token in Python took 250 ms.
_STRING = r'"[^"\\]*+(?:\\.[^"\\]*+)*+"'
_MERGES_ARRAY = re.compile(
    rf"\[\s*+(?:(?:{_STRING}|\[\s*+(?:{_STRING}\s*+,?\s*+)*+\])\s*+,?\s*+)*+\]"
)


def _without_merges(text: str) -> str:
    """The text with BPE ``merges`` emptied: geodiag never uses them, and parsing them
    into Python lists was a third of the gate's peak memory on SmolLM2 (28 of 83 MB)."""
    keys = list(_MERGES_KEY.finditer(text))
    if len(keys) != 1:  # absent, or ambiguous: parse everything
        return text
    start = keys[0].end() - 1  # the '['
    whole = _MERGES_ARRAY.match(text, start)
    if whole is not None:
        return text[:start] + "[]" + text[whole.end() :]
    depth = 0  # an unusual layout: walk strings and brackets one by one
    for m in _STRING_OR_BRACKET.finditer(text, start):
        tok = m.group()
        if tok == "[":
            depth += 1
        elif tok == "]":
            depth -= 1
            if depth == 0:
                return text[:start] + "[]" + text[m.end() :]
    return text


def load_tokenizer(path: str | os.PathLike[str]) -> TokenizerInfo:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InputError(p, f"not valid UTF-8 ({e.reason})") from None
    try:
        data = json.loads(_without_merges(text))
    except json.JSONDecodeError:
        try:  # the shortcut must never turn a valid file into an error
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise InputError(p, f"not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(data, dict):
        raise InputError(p, "not a tokenizer.json object")
    info = TokenizerInfo(path=p)
    for entry in data.get("added_tokens") or []:
        try:
            info.added.append(
                AddedToken(int(entry["id"]), str(entry["content"]), bool(entry.get("special")))
            )
        except (KeyError, TypeError, ValueError):
            raise InputError(p, f"malformed added_tokens entry {entry!r}") from None
    model = data.get("model") or {}
    vocab = model.get("vocab")
    if isinstance(vocab, dict):  # BPE, WordPiece, WordLevel
        info.vocab = {int(i): str(s) for s, i in vocab.items()}
    elif isinstance(vocab, list):  # Unigram: [[piece, score], ...]
        info.vocab = {i: str(entry[0]) for i, entry in enumerate(vocab)}
    decoder = data.get("decoder") or {}
    kinds = {decoder.get("type")} | {d.get("type") for d in decoder.get("decoders") or []}
    info.byte_level = "ByteLevel" in kinds
    return info
