"""Which tokens something feeds the model: the training data (``--data``) and the chat
template; the new tokens' counts, and every other token either feeds (``TokenUsage.fed_ids``:
their rows are judged for being untrained too, :mod:`geodiag.analysis.fed`). (The third source, the codebook's item map, is read with the sidecar:
:func:`geodiag.analysis.findings.items_per_code`.)

An untrained row matters when a token reaches the model: a prompt, a training example or
a constrained output that holds it. The files say part of that:

- ``--data FILE`` (repeatable): JSON lines with a ``text`` field, chat ``messages``
  (``{"role", "content"}``; content a string or a list of ``{"type": "text", "text"}``
  parts), or TRL's ``prompt`` / ``completion`` / ``chosen`` / ``rejected`` (strings or
  message lists); any other file is plain text, one example per line. Tokenized with the
  checkpoint's own ``tokenizer.json`` through the ``tokenizers`` library
  (``add_special_tokens=False``: what the text holds; the template's own tokens are the
  next source), streamed in batches, memory flat in the file size. A record's message
  contents are counted, not the record rendered through the template: a zero count in a
  data file means the file never feeds that token.
- the chat template (``chat_template`` in tokenizer_config.json, ``chat_template.jinja``
  beside it, a GGUF file's ``tokenizer.chat_template``, or ``--chat-template FILE``),
  rendered with a short conversation (system, user, assistant; and a prompt awaiting the
  reply) in a sandboxed jinja2 environment, as transformers renders it; the added tokens
  in the output, special or not, are counted by their strings, longest first (the
  tokenizer splits them out so). Text of the template that is no added token (``user``,
  newlines) is not counted: it is ordinary vocabulary, and counting it would need the
  tokenizer loaded in the gate. The
  tokens it emits reach the model in every conversation. A template that does not emit a token says
  nothing of the data's use of it, so a template alone never shows a token unused.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from itertools import chain
from pathlib import Path

import numpy as np

from geodiag.errors import InputError, cannot_read, require_extra
from geodiag.io.checkpoint import Checkpoint
from geodiag.progress import AFTER_S as PROGRESS_AFTER
from geodiag.progress import COUNTING_EVERY_S as PROGRESS_EVERY
from geodiag.progress import Progress

USAGE_INSTALL = "pip install 'geodiag[usage]'"
# Texts per encode_batch call, and their bytes: large enough that the tokenizer's
# threads stay busy, small enough that memory is flat (a few MB of text in flight).
BATCH_TEXTS = 4096
BATCH_BYTES = 4 << 20
JSON_SUFFIXES = (".jsonl", ".ndjson", ".json")
# The record fields that hold text, in the formats the module docstring lists.
TEXT_FIELDS = ("text", "messages", "prompt", "completion", "chosen", "rejected")

# The conversation the template is rendered with (module docstring); the strings are
# plain words, so every new token in the output came from the template itself.
_CONVERSATION = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "Hi there"},
]


@dataclass
class UsageSource:
    """One source of usage counts."""

    name: str  # as the messages say it: "train.jsonl", "the chat template (tokenizer_config.json)"
    kind: str  # "data" | "chat template"
    path: str
    units: int  # records (data) or conversations rendered (template)
    unit: str  # "records" | "lines" | "conversations"
    # True: a zero count says the source never feeds the token (a data file); False: it
    # says nothing (a template that does not emit a token).
    complete: bool
    method: str  # how tokens were found: "tokenizer.json" | "literal match of added tokens"
    new_tokens_fed: int = 0  # new tokens it holds at least once (set per checkpoint)


@dataclass
class TokenUsage:
    """The counts of each source, per new token (aligned with ``ckpt.new.ids``), and per
    token outside the new set that some source feeds (``fed_ids``, ascending)."""

    sources: list[UsageSource]
    counts: np.ndarray = field(repr=False)  # (n_sources, n_new) int64
    notes: list[str] = field(default_factory=list)
    fed_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), repr=False)
    fed_counts: np.ndarray | None = field(default=None, repr=False)  # (n_sources, n_fed)


def token_usage(ckpt: Checkpoint) -> TokenUsage | None:
    """The usage of ``ckpt``'s new tokens by ``--data`` and its chat template; None when
    neither is there."""
    sources: list[UsageSource] = []
    rows: list[np.ndarray] = []
    fed: list[dict[int, int]] = []  # per source: id -> count, every token it feeds
    notes: list[str] = []
    for path in ckpt.read.data:
        source, counts, full = count_data(path, ckpt)
        sources.append(source)
        rows.append(counts)
        hit = np.flatnonzero(full)
        fed.append(dict(zip(hit.tolist(), full[hit].tolist(), strict=True)))
    configs = tokenizer_configs(ckpt)  # each read once: the template and its variables
    template = find_chat_template(ckpt, configs)
    if template is not None:
        text, where = template
        found = count_template(text, where, ckpt, _special_tokens(configs))
        if isinstance(found, str):
            notes.append(found)
        else:
            sources.append(found[0])
            rows.append(found[1])
            fed.append(found[2])
    if not sources and not notes:
        return None
    n = len(ckpt.new.ids)
    counts = np.stack(rows) if rows else np.zeros((0, n), np.int64)
    sources = [
        replace(s, new_tokens_fed=int((c > 0).sum())) for s, c in zip(sources, counts, strict=True)
    ]
    fed_ids, fed_counts = _fed_outside(fed, ckpt.new.ids)
    return TokenUsage(sources, counts, notes, fed_ids, fed_counts)


def _fed_outside(fed: list[dict[int, int]], new_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ids outside ``new_ids`` that some source feeds, ascending; (n_sources, n) counts)."""
    ids = np.array(sorted(set().union(*fed)) if fed else [], dtype=np.int64)
    ids = ids[~np.isin(ids, new_ids)]
    counts = np.array([[f.get(int(i), 0) for i in ids] for f in fed], dtype=np.int64)
    return ids, counts.reshape(len(fed), len(ids))


# ---- the chat template -------------------------------------------------------------


def tokenizer_configs(ckpt: Checkpoint) -> list[tuple[Path, dict]]:
    """(path, parsed content) of each ``tokenizer_config.json`` beside the checkpoint, in
    the order its folders are looked in (the weights', then a PEFT adapter's base)."""
    from geodiag.jsonio import read_json_object

    paths = (root / "tokenizer_config.json" for root in ckpt.roots)
    return [(p, read_json_object(p)) for p in paths if p.is_file()]


def find_chat_template(
    ckpt: Checkpoint, configs: list[tuple[Path, dict]] | None = None
) -> tuple[str, str] | None:
    """(template text, where it came from), or None when the checkpoint has none.
    ``configs``: :func:`tokenizer_configs`, when the caller has read them."""
    configs = tokenizer_configs(ckpt) if configs is None else configs
    by_folder = {p.parent: content for p, content in configs}
    given = ckpt.read.chat_template
    if given is not None:
        try:
            return Path(given).read_text(encoding="utf-8"), str(given)
        except OSError as e:
            raise cannot_read(given, e) from None
        except UnicodeDecodeError:
            raise InputError(given, "a chat template must be UTF-8 text") from None
    metadata = getattr(ckpt.store, "metadata", None)
    if isinstance(metadata, dict) and isinstance(metadata.get("tokenizer.chat_template"), str):
        return metadata["tokenizer.chat_template"], f"{ckpt.path.name} (tokenizer.chat_template)"
    for root in ckpt.roots:
        jinja = root / "chat_template.jinja"
        if jinja.is_file():
            try:
                return jinja.read_text(encoding="utf-8"), "chat_template.jinja"
            except (OSError, UnicodeDecodeError) as e:
                raise InputError(jinja, f"cannot read the chat template: {e}") from None
        if root in by_folder:
            template = _template_in(root / "tokenizer_config.json", by_folder[root])
            if template is not None:
                return template, "tokenizer_config.json"
    return None


def _template_in(config: Path, content: dict) -> str | None:
    value = content.get("chat_template")
    if isinstance(value, list):  # named templates: [{"name": "default", "template": ...}]
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        value = named.get("default", next(iter(named.values()), None))
    if value is not None and not isinstance(value, str):
        raise InputError(config, f"chat_template must be a string, got {type(value).__name__}")
    return value


def _special_tokens(configs: list[tuple[Path, dict]]) -> dict[str, str]:
    """bos_token, eos_token, ... as the first tokenizer_config.json names them (the
    template's variables), content strings."""
    out: dict[str, str] = {}
    for key, value in (configs[0][1] if configs else {}).items():
        if key.endswith("_token") and isinstance(value, dict):
            value = value.get("content")
        if key.endswith("_token") and isinstance(value, str):
            out[key] = value
    return out


def render_template(template: str, specials: dict[str, str]) -> list[str]:
    """The template rendered with the module's conversation: the whole exchange, then a
    prompt awaiting the reply; a template that refuses a system turn is rendered without
    it. Raises ValueError when no rendering succeeds."""
    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    def strftime_now(fmt: str) -> str:
        return time.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, indent=None, **_: json.dumps(x, indent=indent)
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now)
    try:
        compiled = env.from_string(template)
    except TemplateError as e:
        raise ValueError(f"the chat template does not parse: {e}") from None
    out, errors = [], []
    for messages, prompt in (
        (_CONVERSATION, False),
        (_CONVERSATION[:2], True),
        (_CONVERSATION[1:], False),
        (_CONVERSATION[1:2], True),
    ):
        try:
            out.append(compiled.render(messages=messages, add_generation_prompt=prompt, **specials))
        except Exception as e:  # a template's own raise_exception, or an error in it
            errors.append(str(e))
    if not out:
        raise ValueError(f"the chat template does not render: {errors[0]}")
    return out


def count_template(
    text: str, where: str, ckpt: Checkpoint, specials: dict[str, str]
) -> tuple[UsageSource, np.ndarray, dict[int, int]] | str:
    """(the template's source, tokens emitted per conversation per new token, every added
    token it emits: id -> per conversation), or a note saying why the template could not
    be counted. ``specials``: the template's variables (bos_token, ...)."""
    import importlib.util

    if importlib.util.find_spec("jinja2") is None:
        return f"chat template ({where}) not rendered: it needs jinja2 ({USAGE_INSTALL})"
    try:
        rendered = render_template(text, specials)
    except ValueError as e:
        return f"{where}: {e}; its tokens are not counted"
    # Added tokens are split out of text by literal match before the model sees it (the
    # tokenizers library's AddedVocabulary), so counting their strings is exact and needs
    # no tokenizer loaded: the gate stays light. A new token that is no added token is not
    # counted here (the template is no complete source: a zero says nothing).
    method = "literal match of added tokens"
    emitted = added_tokens_in(rendered, ckpt.tokenizer.added if ckpt.tokenizer is not None else [])
    counts = np.array([emitted.get(int(t), 0) for t in ckpt.new.ids], np.int64)
    name = f"the chat template ({where})"
    source = UsageSource(
        name, "chat template", where, len(rendered), "conversations", False, method
    )
    return source, counts, emitted


def added_tokens_in(rendered: list[str], added) -> dict[int, int]:
    """{id: occurrences} of the added tokens (``AddedToken`` list) in the texts
    ``rendered``, the most in any one of them: matched as the tokenizer splits them out,
    the longest first at each place, so ``<a_1>`` is not counted inside ``<a_12>``."""
    import re

    by_text = {t.content: t.id for t in added if t.content}
    present = sorted((c for c in by_text if any(c in r for r in rendered)), key=len, reverse=True)
    if not present:
        return {}
    pattern = re.compile("|".join(map(re.escape, present)))
    out: dict[int, int] = {}
    for r in rendered:
        seen: dict[int, int] = {}
        for m in pattern.finditer(r):
            seen[by_text[m.group()]] = seen.get(by_text[m.group()], 0) + 1
        for tid, c in seen.items():
            out[tid] = max(out.get(tid, 0), c)
    return out


# ---- the data ------------------------------------------------------------------------


def _tokenizer_file(ckpt: Checkpoint) -> Path | None:
    tok = ckpt.tokenizer
    if tok is None or tok.path.name != "tokenizer.json":
        return None
    return tok.path


def _encoder(ckpt: Checkpoint):
    """The checkpoint's tokenizer.json as a ``tokenizers.Tokenizer``; InputError without
    the file or the library."""
    path = _tokenizer_file(ckpt)
    if path is None:
        have = (
            "no tokenizer"
            if ckpt.tokenizer is None
            else f"its tokenizer is {ckpt.tokenizer.path.name}"
        )
        raise InputError(
            "--data",
            f"counting tokens in data needs the checkpoint's tokenizer.json ({have}); "
            "point at the folder that holds it",
        )
    require_extra("--data", "the tokenizers library", ["tokenizers"], USAGE_INSTALL)
    return _load_encoder(path)


_ENCODERS: dict[tuple[str, int, int], object] = {}


def _load_encoder(path: Path):
    from tokenizers import Tokenizer

    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _ENCODERS:
        try:
            _ENCODERS[key] = Tokenizer.from_file(str(path))
        except Exception as e:  # the library's own parse error
            raise InputError(path, f"the tokenizers library cannot load it: {e}") from None
    return _ENCODERS[key]


# Counts over the whole vocabulary per (data file, tokenizer) as read this process: a
# `check` of several checkpoints that share a tokenizer reads the data once.
_COUNTED: dict[tuple, tuple[UsageSource, np.ndarray]] = {}


def count_data(path: Path, ckpt: Checkpoint) -> tuple[UsageSource, np.ndarray, np.ndarray]:
    """(the source, occurrences of each new token of ``ckpt`` in the data file ``path``, and
    of every token id)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(path, "--data: no such file")
    encoder = _encoder(ckpt)
    tok_path = _tokenizer_file(ckpt)
    assert tok_path is not None
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, _file_digest(tok_path))
    if key not in _COUNTED:
        _COUNTED[key] = count_file(path, encoder, encoder.get_vocab_size(with_added_tokens=True))
    source, full = _COUNTED[key]
    ids = ckpt.new.ids
    inside = ids < len(full)
    counts = np.zeros(len(ids), np.int64)
    counts[inside] = full[ids[inside]]
    return source, counts, full


def _file_digest(path: Path) -> str:
    import hashlib  # ~5 ms of start-up, for a file asked for by --data

    return hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest()


def count_file(
    path: Path, encoder, n_vocab: int, *, say: Callable[[str], None] | None = None
) -> tuple[UsageSource, np.ndarray]:
    """(the source, occurrences of every token id in the file), streaming."""
    counts = np.zeros(n_vocab, np.int64)
    is_json = path.suffix.lower() in JSON_SUFFIXES
    total = path.stat().st_size
    progress = _Progress(path.name, total, say)
    units = 0
    encode = getattr(encoder, "encode_batch_fast", None) or encoder.encode_batch
    for texts, done, records in _batches(path, is_json):
        units += records
        if texts:
            encodings = encode(texts, add_special_tokens=False)
            ids = np.fromiter(chain.from_iterable(e.ids for e in encodings), dtype=np.int64)
            if len(ids):
                found = np.bincount(ids, minlength=len(counts))
                if len(found) > len(counts):  # ids past the vocabulary: never, but not lost
                    counts = np.concatenate([counts, np.zeros(len(found) - len(counts), np.int64)])
                counts[: len(found)] += found
        progress.update(done)
    progress.finish()
    unit = "records" if is_json else "lines"
    source = UsageSource(path.name, "data", str(path), units, unit, True, "tokenizer.json")
    return source, counts


def _batches(path: Path, is_json: bool) -> Iterator[tuple[list[str], int, int]]:
    """(texts, bytes read so far, records they came from) in batches of BATCH_TEXTS or
    BATCH_BYTES (a chat record gives a text per message)."""
    try:
        f = path.open("rb")
    except OSError as e:
        raise cannot_read(path, e) from None
    with f:
        head = f.read(4096).lstrip()
        f.seek(0)
        if is_json and head.startswith(b"["):  # one JSON array, not lines
            yield from _array_batches(path, f.read())
            return
        texts: list[str] = []
        size = done = records = 0
        for lineno, raw in enumerate(f, 1):
            done += len(raw)
            if is_json:
                if not raw.strip():
                    continue
                try:
                    record = json.loads(raw)
                except (ValueError, RecursionError) as e:
                    raise InputError(path, f"line {lineno}: not JSON ({e})") from None
                found = record_texts(record, path, lineno)
            else:
                try:
                    found = [raw.decode("utf-8")]
                except UnicodeDecodeError:
                    raise InputError(path, f"line {lineno}: not UTF-8 text") from None
            texts += found
            size += len(raw)
            records += 1
            if len(texts) >= BATCH_TEXTS or size >= BATCH_BYTES:
                yield texts, done, records
                texts, size, records = [], 0, 0
        yield texts, done, records


def _array_batches(path: Path, raw: bytes) -> Iterator[tuple[list[str], int, int]]:
    try:
        records = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise InputError(path, f"not JSON ({e})") from None
    texts: list[str] = []
    n = 0
    for k, record in enumerate(records, 1):
        texts += record_texts(record, path, k, what="record")
        n += 1
        if len(texts) >= BATCH_TEXTS:
            yield texts, 0, n
            texts, n = [], 0
    yield texts, len(raw), n


def record_texts(record: object, path: Path, n: int, what: str = "line") -> list[str]:
    """The text strings of one record (module docstring's formats)."""
    if not isinstance(record, dict):
        raise InputError(path, f"{what} {n}: expected a JSON object, got {type(record).__name__}")
    out: list[str] = []
    present = [k for k in TEXT_FIELDS if k in record]
    if not present:
        keys = ", ".join(sorted(map(str, record))[:8]) or "none"
        raise InputError(
            path,
            f"{what} {n}: no text field (expected one of {', '.join(TEXT_FIELDS)}; has {keys})",
        )
    for key in present:
        value = record[key]
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, list):
            for message in value:
                out += _message_texts(message, path, n, what, key)
        elif value is not None:
            raise InputError(path, f"{what} {n}: {key!r} must be a string or a list of messages")
    return out


def _message_texts(message: object, path: Path, n: int, what: str, key: str) -> list[str]:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):  # [{"type": "text", "text": ...}, {"type": "image"}, ...]
        return [
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        ]
    if content is None and isinstance(message, dict):
        return []  # a tool call without content
    raise InputError(path, f"{what} {n}: {key!r} holds a message without text content")


class _Progress:
    """'counting new tokens in NAME: 312 MB of 1.02 GB (31%)' on stderr, once counting has
    run PROGRESS_AFTER seconds, then every PROGRESS_EVERY."""

    def __init__(self, name: str, total: int, say: Callable[[str], None] | None) -> None:
        self.name, self.total = name, total
        self.clock = Progress(PROGRESS_AFTER, PROGRESS_EVERY, say)

    def update(self, done: int) -> None:
        if not self.clock.due():
            return
        rate = done / max(self.clock.elapsed, 1e-9) / 1e6
        pct = 100 * done / self.total if self.total else 100.0
        self.clock.say(
            f"counting new tokens in {self.name}: {done / 1e6:.0f} MB of "
            f"{self.total / 1e6:.0f} MB ({pct:.0f}%), {rate:.1f} MB/s"
        )

    def finish(self) -> None:
        if self.clock.shown:
            self.clock.say(f"counted {self.name} in {self.clock.elapsed:.0f} s")
