"""Token strings and added tokens from ``tokenizer.json``, without loading a tokenizer.

A CI gate should not import transformers to learn that id 49152 is ``<a_0>``:
the JSON already says so.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache, partial
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from geodiag.errors import InputError, cannot_read, nested_too_deeply
from geodiag.io.formats.gguf import CONTROL, USER_DEFINED, GGUFStore
from geodiag.io.sources.layouts import check_not_lfs_pointer

if TYPE_CHECKING:
    import numpy as np


def list_names(names: list[str], total: int, *, counted: bool = False) -> str:
    """``names`` (the first of ``total``), comma-separated; the rest as ", ..." or, with
    ``counted``, " and N more"."""
    more = total - len(names)
    rest = (f" and {more} more" if counted else ", ...") if more > 0 else ""
    return ", ".join(names) + rest


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
    added: list[AddedToken] = field(default_factory=list)
    byte_level: bool = False
    _vocab: dict[int, str] | None = field(default=None, repr=False)
    _load_vocab: Callable[[], dict[int, str]] | None = field(default=None, repr=False)
    _lines: _VocabLines | None = field(default=None, repr=False)  # single entries, unparsed

    def __post_init__(self) -> None:
        self._added_by_id: dict[int, str] | None = None

    @property
    def vocab(self) -> dict[int, str]:
        """id -> raw token string; decoded from the file on first use (the gate never
        needs it: added tokens name the new rows)."""
        if self._vocab is None:
            load, self._load_vocab = self._load_vocab, None
            self._vocab = load() if load is not None else {}
        return self._vocab

    def __len__(self) -> int:
        ids = list(self.vocab) + [t.id for t in self.added]
        return max(ids) + 1 if ids else 0

    def token(self, token_id: int) -> str | None:
        """Readable token string: byte-level stand-ins decoded (``Ġthe`` -> `` the``)."""
        if self._added_by_id is None:  # built on first use: `added` is filled after init
            self._added_by_id = {t.id: t.content for t in self.added}
        if token_id in self._added_by_id:
            return self._added_by_id[token_id]
        raw = self._entry(token_id)
        if raw is None or not self.byte_level:
            return raw
        table = _byte_decoder()
        if not all(ch in table for ch in raw):
            return raw
        return bytes(table[ch] for ch in raw).decode("utf-8", errors="replace")

    def _entry(self, token_id: int) -> str | None:
        if self._vocab is None and self._lines is not None:
            try:
                return self._lines.get(token_id)
            except _Unexpected:  # not one entry per line in id order: decode them all
                self._lines = None
        return self.vocab.get(token_id)

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


_DECODER = json.JSONDecoder()
_WS = re.compile(r"[ \t\n\r]*")  # JSON's whitespace
_TAIL = re.compile(rb"\][ \t\n\r]*\}[ \t\n\r]*\}[ \t\n\r]*\Z")  # merges, model, top
_THEN_MERGES = re.compile(rb'[ \t\n\r]*,[ \t\n\r]*"merges"[ \t\n\r]*:[ \t\n\r]*\[')


class _Unexpected(Exception):
    """Not the layout the fast reader takes: parse the whole text instead."""


def _object_until(text: str, i: int, stop: str) -> tuple[dict, int, bool]:
    """Members of the JSON object at ``text[i]``, decoded one by one by json's own scanner,
    up to a member named ``stop``. Returns (members, index, stopped): index is at the
    ``stop`` member's value when stopped, else past the closing brace."""
    if text[i : i + 1] != "{":
        raise _Unexpected
    out: dict = {}
    i = _WS.match(text, i + 1).end()
    if text[i : i + 1] == "}":
        return out, i + 1, False
    while True:
        key, i = _DECODER.raw_decode(text, i)
        i = _WS.match(text, i).end()
        if not isinstance(key, str) or text[i : i + 1] != ":":
            raise _Unexpected
        i = _WS.match(text, i + 1).end()
        if key == stop:
            return out, i, True
        out[key], i = _DECODER.raw_decode(text, i)
        i = _WS.match(text, i).end()
        if text[i : i + 1] == "}":
            return out, i + 1, False
        if text[i : i + 1] != ",":
            raise _Unexpected
        i = _WS.match(text, i + 1).end()


def _read_hf_layout(raw: bytes) -> tuple[dict, int] | None:
    """(the tokenizer.json object up to the model's ``vocab``, the byte offset of the
    vocab's value), or None when the file is not in the layout HF tokenizers writes
    (then the caller parses it whole).

    HF tokenizers writes ``added_tokens`` and ``decoder`` before ``model``, ``vocab``
    and ``merges`` as the model's last members and ``model`` as the last top-level one.
    Only the bytes before the vocabulary are decoded here, member by member as
    ``json.loads`` would; the vocabulary waits for :func:`_hf_vocab` (its first use) and
    the merges (half of SmolLM2's 3.5 MB) are never decoded. The file must end in
    ``] } }``, else it is parsed whole (so a file cut short is still an error, but for
    freak cuts inside the merges). Not checked, as nothing after the vocabulary is read:
    the merges themselves, and a duplicate key after them (which no writer produces).
    """
    brace = raw.find(b"{", raw.find(b'"vocab"') + 1)  # the first "vocab": { is the model's?
    if brace < 1 or _TAIL.search(raw, max(brace, len(raw) - 1024)) is None:
        return None
    try:
        text = raw[: brace + 1].decode("utf-8")  # cut at an ASCII byte: a whole character
        top, i, at_model = _object_until(text, _WS.match(text).end(), "model")
        if not at_model or not {"added_tokens", "decoder"} <= top.keys():
            return None
        model, i, at_vocab = _object_until(text, i, "vocab")
    except (_Unexpected, json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return None  # (a walk past the cut: that "vocab" was a token's or a pattern's)
    if not at_vocab or i != len(text) - 1:
        return None
    top["model"] = model
    return top, brace


def _vocab_by_id(vocab: object) -> dict[int, str]:
    """id -> token string of a model's ``vocab``: ``{token: id}`` or Unigram's
    ``[[piece, score], ...]``."""
    if isinstance(vocab, dict):  # BPE, WordPiece, WordLevel
        inverse = dict(zip(vocab.values(), vocab.keys(), strict=True))
        if all(type(i) is int for i in inverse):  # the usual case: no conversion needed
            return inverse
        return {int(i): str(s) for s, i in vocab.items()}
    if isinstance(vocab, list):
        return {i: str(entry[0]) for i, entry in enumerate(vocab)}
    return {}


def _decode(path: Path, raw: bytes) -> str:
    try:  # bytes, then one decode: text mode's newline translation cost 15 ms on SmolLM2
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(path, f"not valid UTF-8 ({e.reason})") from None


def _parse_whole(path: Path, text: str) -> dict:
    try:
        try:
            data = json.loads(_without_merges(text))
        except json.JSONDecodeError:  # the shortcut must never turn a valid file into an error
            data = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(path, f"not valid JSON ({e.msg} at line {e.lineno})") from None
    except RecursionError:
        raise nested_too_deeply(path) from None
    if not isinstance(data, dict):
        raise InputError(path, "not a tokenizer.json object")
    return data


_VOCAB_LINE = re.compile(
    rb'[ \t]*("(?:[^"\\]|\\.)*")[ \t]*:[ \t]*(0|[1-9][0-9]*)[ \t]*,?[ \t\r]*\Z'
)


class _VocabLines:
    """Single entries of a vocabulary written as HF tokenizers writes it: one member per
    line, in id order, so line i after the opening brace reads ``"token": i``. Each line
    read is checked to say exactly that (raw newlines are never inside JSON strings);
    any other line raises _Unexpected, and the caller decodes the whole vocabulary.
    Neighbour display needs a few dozen of SmolLM2's 49k strings: ~40 ms less. Not seen
    this way: a second ``vocab`` key after the first (json.loads would take the last;
    no writer produces one)."""

    def __init__(self, raw: bytes, at: int) -> None:
        self.raw, self.at = raw, at
        self._newlines: np.ndarray | None = None  # byte offsets of the newlines past ``at``

    def get(self, token_id: int) -> str:
        if self._newlines is None:
            import numpy as np  # (loaded already on the read path; not at import)

            span = np.frombuffer(self.raw, np.uint8, offset=self.at)
            self._newlines = np.flatnonzero(span == 10) + self.at
            first = int(self._newlines[0]) if len(self._newlines) else len(self.raw)
            if self.raw[self.at : first].rstrip(b" \t\r") != b"{":
                raise _Unexpected  # not one member per line
        nl, i = self._newlines, int(token_id)
        if not 0 <= i < len(nl) - 1:
            raise _Unexpected
        line = _VOCAB_LINE.match(self.raw[int(nl[i]) + 1 : int(nl[i + 1])])
        if line is None or int(line[2]) != i:
            raise _Unexpected
        try:
            return json.loads(line[1])
        except ValueError:  # bad escapes or UTF-8: the whole decode says where
            raise _Unexpected from None


def _hf_vocab(path: Path, raw: bytes, at: int) -> dict[int, str]:
    """The vocabulary whose value starts at byte ``at``, where ``merges`` must follow it
    as the model's last member; else the whole file's vocabulary, parsed as
    :func:`load_tokenizer` parses other layouts. Decodes the bytes up to the first
    ``"merges"`` first (a third of SmolLM2's file), then, should a token be named so,
    the rest."""
    cut = raw.find(b'"merges"', at)
    for stop in (cut, len(raw)) if cut > at else (len(raw),):
        try:
            text = str(memoryview(raw)[at:stop], "utf-8")  # no copy of the bytes
            vocab, i = _DECODER.raw_decode(text, 0)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            continue
        end = stop - len(text[i:].encode("utf-8"))  # past the vocabulary, in bytes
        merges = _THEN_MERGES.match(raw, end)
        if isinstance(vocab, dict) and merges is not None:
            if _TAIL.search(raw, max(merges.end() - 1, len(raw) - 1024)) is not None:
                return _vocab_by_id(vocab)
        break  # decoded, but not followed as HF writes it
    model = _parse_whole(path, _decode(path, raw)).get("model")
    return _vocab_by_id(model.get("vocab") if isinstance(model, dict) else None)


def tokenizer_in_memory(tokenizer: object) -> TokenizerInfo:
    """The added tokens of a transformers tokenizer in memory (``added_tokens_decoder``:
    id -> its AddedToken), as :func:`load_tokenizer` reads them from its folder, so that the
    new rows are found by the same rule (``geodiag.io.vocabulary.new_tokens.from_tokenizer``)."""
    decoder = getattr(tokenizer, "added_tokens_decoder", None)
    if not isinstance(decoder, dict):
        raise InputError("tokenizer", "is not a transformers tokenizer (no added_tokens_decoder)")
    added = [
        AddedToken(int(i), str(t.content), bool(getattr(t, "special", False)))
        for i, t in sorted(decoder.items())
    ]
    return TokenizerInfo(Path(f"<{type(tokenizer).__name__}>"), added)


def load_tokenizer(path: str | os.PathLike[str]) -> TokenizerInfo:
    p = Path(path)
    check_not_lfs_pointer(p)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise cannot_read(p, e) from None
    info = TokenizerInfo(path=p)
    fast = _read_hf_layout(raw)
    if fast is not None:
        data, at = fast
        info._load_vocab = partial(_hf_vocab, p, raw, at)
        info._lines = _VocabLines(raw, at)
    else:
        data = _parse_whole(p, _decode(p, raw))
        info._vocab = _vocab_by_id((data.get("model") or {}).get("vocab"))
    for entry in data.get("added_tokens") or []:
        try:
            info.added.append(
                AddedToken(int(entry["id"]), str(entry["content"]), bool(entry.get("special")))
            )
        except (KeyError, TypeError, ValueError):
            raise InputError(p, f"malformed added_tokens entry {entry!r}") from None
    decoder = data.get("decoder") or {}
    kinds = {decoder.get("type")} | {d.get("type") for d in decoder.get("decoders") or []}
    info.byte_level = "ByteLevel" in kinds
    return info


# An older slow-tokenizer folder (sentencepiece): tokenizer.model holds the pieces,
# added_tokens.json the tokens added since ({"<a_0>": 32000, ...}), tokenizer_config.json
# which of them are special (added_tokens_decoder). transformers v4 wrote these for
# use_fast=False tokenizers, and many Llama-2 / Mistral-era checkpoints still ship them.
SENTENCEPIECE_MODEL = "tokenizer.model"
ADDED_TOKENS = "added_tokens.json"
TOKENIZER_FILES = ("tokenizer.json", SENTENCEPIECE_MODEL)


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if i >= len(buf) or shift > 63:
            raise ValueError("truncated varint")
        b = buf[i]
        value |= (b & 0x7F) << shift
        i, shift = i + 1, shift + 7
        if not b & 0x80:
            return value, i


def _fields(buf: bytes):
    """(field number, wire type, value) of a protobuf message: int for varints, bytes for
    length-delimited fields; fixed-width fields are skipped (value None)."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 2:
            n, i = _varint(buf, i)
            if i + n > len(buf):
                raise ValueError("truncated field")
            value, i = buf[i : i + n], i + n
        elif wire in (1, 5):
            value, i = None, i + (8 if wire == 1 else 4)
        else:
            raise ValueError(f"wire type {wire}")
        yield number, wire, value


def sentencepiece_pieces(path: Path) -> dict[int, str]:
    """id -> piece of a sentencepiece ``tokenizer.model`` (ModelProto: field 1, repeated
    SentencePiece, whose field 1 is the piece), read without the sentencepiece library."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise cannot_read(path, e) from None
    pieces: dict[int, str] = {}
    try:
        for number, wire, value in _fields(raw):
            if number != 1 or wire != 2:
                continue
            piece = next((v for n, w, v in _fields(value) if n == 1 and w == 2), b"")
            pieces[len(pieces)] = piece.decode("utf-8", errors="replace")
    except ValueError as e:
        raise InputError(path, f"not a sentencepiece model ({e}); truncated or corrupt?") from None
    if not pieces:
        raise InputError(path, "not a sentencepiece model (no pieces)")
    return pieces


def _json_file(path: Path) -> object:
    try:
        return json.loads(_decode(path, path.read_bytes()))
    except json.JSONDecodeError as e:
        raise InputError(path, f"not valid JSON ({e.msg} at line {e.lineno})") from None
    except RecursionError:
        raise nested_too_deeply(path) from None
    except OSError as e:
        raise cannot_read(path, e) from None


def load_sentencepiece_folder(model_path: Path) -> TokenizerInfo:
    """A slow-tokenizer folder: the pieces of ``tokenizer.model``, the tokens of
    ``added_tokens.json`` beside it, special as ``tokenizer_config.json`` says."""
    root = model_path.parent
    pieces = sentencepiece_pieces(model_path)
    added_path = root / ADDED_TOKENS
    info = TokenizerInfo(path=added_path if added_path.is_file() else model_path, _vocab=pieces)
    if not added_path.is_file():
        return info
    added = _json_file(added_path)
    if not isinstance(added, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
        for k, v in added.items()
    ):
        raise InputError(added_path, 'expected {"token": id, ...}')
    special = set()
    config_path = root / "tokenizer_config.json"
    if config_path.is_file():
        config = _json_file(config_path)
        decoder = config.get("added_tokens_decoder") if isinstance(config, dict) else None
        for entry in (decoder or {}).values():
            if isinstance(entry, dict) and entry.get("special"):
                special.add(str(entry.get("content")))
    info.added = [
        AddedToken(i, t, t in special) for t, i in sorted(added.items(), key=lambda kv: kv[1])
    ]
    return info


def load_tokenizer_in(find: Callable[[str], Path]) -> TokenizerInfo | None:
    """The tokenizer of a folder (``find(name)``: where the file ``name`` would be):
    ``tokenizer.json``, else a sentencepiece ``tokenizer.model`` with its added tokens."""
    if (p := find("tokenizer.json")).is_file():
        return load_tokenizer(p)
    if (p := find(SENTENCEPIECE_MODEL)).is_file():
        return load_sentencepiece_folder(p)
    return None


def gguf_tokenizer(store: GGUFStore) -> TokenizerInfo | None:
    """A GGUF file's tokenizer: token strings from ``tokenizer.ggml.tokens``; the added
    tokens are those typed USER_DEFINED (added, not special) or CONTROL (special), as
    llama.cpp marks them. None when the file carries no token list."""
    count = store.token_count()
    if count is None:
        return None
    types = store.token_types()
    added = []
    if types is not None:
        for i in np.flatnonzero((types == USER_DEFINED) | (types == CONTROL)):
            added.append(AddedToken(int(i), store.token_string(int(i)), types[i] == CONTROL))
    info = TokenizerInfo(path=Path(store.path), added=added)  # a URL's: its .name only
    info.byte_level = store.metadata.get("tokenizer.ggml.model") == "gpt2"
    info._load_vocab = lambda: {i: store.token_string(i) for i in range(count)}
    info._lines = _GGUFTokens(store)
    return info


class _GGUFTokens:
    """Single token strings on demand (the tokenizer's ``_lines`` role): no full decode."""

    def __init__(self, store: GGUFStore) -> None:
        self.store = store

    def get(self, token_id: int) -> str | None:
        return self.store.token_string(token_id)
