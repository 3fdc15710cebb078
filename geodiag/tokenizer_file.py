"""Token strings and added tokens from ``tokenizer.json``, without loading a tokenizer.

A CI gate should not import transformers to learn that id 49152 is ``<a_0>``:
the JSON already says so.
"""

from __future__ import annotations

import json
import os
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


def load_tokenizer(path: str | os.PathLike[str]) -> TokenizerInfo:
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(p, f"not valid JSON ({e.__class__.__name__})") from None
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
