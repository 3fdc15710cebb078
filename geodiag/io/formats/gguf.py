"""A GGUF file (llama.cpp's format) as a :class:`~geodiag.io.formats.tensor_store.TensorStore`.

Rows are dequantized by llama.cpp's own ``gguf`` package (``gguf.quants.dequantize``,
numpy only; the ``gguf`` extra), so a row reads as llama.cpp computes it, for every
type that package can dequantize. GGUF stores ``token_embd.weight`` as ne=[d, vocab]:
each row of d values is a whole number of quant blocks, so a row's bytes are one span of
the file and only the rows asked for are read (peak memory does not grow with the file).

The file is read through a :class:`~geodiag.io.sources.byte_ranges.ByteSource`: a local file, or
a URL's byte ranges (``geodiag.io.sources.remote``), by the same code. The header (metadata,
with the tokenizer's token list, then the tensor infos) has no stated length, so it is
read in a growing window: :data:`HEADER_WINDOW` first, doubled whenever the parse runs
past it, so a remote read costs at most about twice the header, whatever the vocabulary.

The header is parsed here rather than by ``gguf.GGUFReader``: the reader builds numpy
arrays for every string of the token list and merges (3.6 s on SmolLM2's 98k strings);
walking them with ``struct`` takes ~20 ms (the merges only skipped over), and only the
token strings asked for are decoded.
``tests/geodiag/io/formats/test_gguf.py`` checks the two parsers agree. Every malformed header
(bad magic, a count or a length past the end, an unknown type, a shape that is not
whole blocks, tensor data past the end) is an :class:`InputError` naming the file.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.io.formats.format import Format, RemoteCheckpoint, SmallFiles
from geodiag.io.formats.tensor_store import checked_rows, digest_text, new_digest
from geodiag.io.sources.byte_ranges import ByteSource, LocalFile, read_rows
from geodiag.io.sources.remote import GGUF_SMALL_FILES, fetch_small_files

INSTALL = "pip install 'geodiag[gguf]' (llama.cpp's gguf package)"
MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
# The header's first read, doubled while the parse runs past it: SmolLM2's header (49k
# tokens and 48k merges) is ~3 MB, so a local or remote open reads it in three steps.
HEADER_WINDOW = 1 << 20
EMBEDDING = "token_embd.weight"
TOKENS = "tokenizer.ggml.tokens"
OUTPUT_HEAD = "output.weight"
# llama.cpp's token types (gguf.TokenType): USER_DEFINED marks added tokens, CONTROL
# special ones, UNUSED slots no text produces.
CONTROL, USER_DEFINED, UNUSED = 3, 4, 5
_INTEGER_TYPES = ("I8", "I16", "I32", "I64")

# GGUF metadata value types (gguf.GGUFValueType): struct format of the scalars.
_SCALARS = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}
_STRING, _ARRAY = 8, 9


def load_gguf_package(where: str | Path = "gguf"):
    """llama.cpp's ``gguf`` package, or an InputError naming ``where`` and the install."""
    try:
        import gguf
        import gguf.quants
    except ImportError:
        raise InputError(
            where, f"reading a GGUF file needs llama.cpp's gguf package: {INSTALL}"
        ) from None
    return gguf


@dataclass(frozen=True)
class TensorInfo:
    name: str
    ne: tuple[int, ...]  # GGUF order: ne[0] is the contiguous (row) dimension
    type_name: str
    type_id: int
    offset: int  # from the start of the file
    n_bytes: int
    row_bytes: int  # bytes of one row of ne[0] values


class _Header:
    """A cursor over the file's first bytes, read from ``source`` in a window that grows
    (doubling) as the cursor needs; every read is bounds-checked against the file's size."""

    def __init__(self, source: ByteSource, size: int) -> None:
        self.source, self.where, self.size = source, source.where, size
        self.buf, self.at = b"", 0
        self.grow(HEADER_WINDOW)

    def grow(self, end: int) -> None:
        """Hold at least the bytes before ``end`` (at most the whole file); a window too
        short grows to twice its size at least."""
        if end <= len(self.buf) or len(self.buf) >= self.size:
            return
        want = min(self.size, max(end, 2 * len(self.buf)))
        self.buf += self.source.read([(len(self.buf), want - len(self.buf))])[0]

    def _need(self, n: int, what: str) -> None:
        if n < 0 or self.at + n > self.size:
            raise InputError(
                self.where,
                f"truncated or corrupt GGUF header: {what} at byte {self.at} runs past the end "
                f"of the file ({self.size} bytes)",
            )
        if self.at + n > len(self.buf):
            self.grow(self.at + n)

    def scalar(self, fmt: str, what: str):
        size = struct.calcsize("<" + fmt)
        self._need(size, what)
        (value,) = struct.unpack_from("<" + fmt, self.buf, self.at)
        self.at += size
        return value

    def string_span(self, what: str) -> tuple[int, int]:
        n = self.scalar("Q", what)
        self._need(n, what)
        start = self.at
        self.at += n
        return start, n

    def string(self, what: str) -> str:
        start, n = self.string_span(what)
        return self.buf[start : start + n].decode("utf-8", errors="replace")

    def _walk_strings(self, count: int, key: str) -> tuple[np.ndarray, np.ndarray] | None:
        """(starts, lengths) of the token strings; other string arrays (the merges) are
        only skipped over: None."""
        keep = key == TOKENS
        while True:  # walked again over a grown window until the strings end inside it
            try:
                starts, end = (
                    _walk(self.buf, self.at, count)
                    if keep
                    else ([], _skip(self.buf, self.at, count))
                )
            except struct.error:  # a length field past the window: its end is unknown
                starts, end = [], None
            if end is not None and end <= len(self.buf):
                break
            if len(self.buf) >= self.size or (end is not None and end > self.size):
                raise InputError(
                    self.where,
                    f"truncated or corrupt GGUF header: the strings of '{key}' from byte "
                    f"{self.at} run past the end of the file ({self.size} bytes)",
                )
            self.grow(len(self.buf) + 1 if end is None else end)
        self.at = end
        if not keep:
            return None
        if not count:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        first = np.asarray(starts, dtype=np.int64)
        after = np.append(first[1:] - 8, end)  # each string ends where the next length starts
        return first, after - first

    def value(self, vtype: int, key: str):
        """A metadata value: a scalar, a str, or for arrays (elem type, count, start byte,
        string spans or None); arrays are skipped over, not decoded."""
        if vtype in _SCALARS:
            return self.scalar(_SCALARS[vtype], f"value of '{key}'")
        if vtype == _STRING:
            return self.string(f"value of '{key}'")
        if vtype != _ARRAY:
            raise InputError(self.where, f"corrupt GGUF header: '{key}' has unknown type {vtype}")
        etype = self.scalar("I", f"array type of '{key}'")
        count = self.scalar("Q", f"array length of '{key}'")
        start = self.at
        if etype in _SCALARS:
            self._need(count * struct.calcsize("<" + _SCALARS[etype]), f"array '{key}'")
            self.at += count * struct.calcsize("<" + _SCALARS[etype])
            return _Array(etype, count, start, None)
        if etype == _STRING:
            self._need(count * 8, f"array '{key}'")  # at least the lengths
            return _Array(etype, count, start, self._walk_strings(count, key))
        raise InputError(self.where, f"corrupt GGUF header: array '{key}' of type {etype}")


_U64 = struct.Struct("<Q").unpack_from


def _walk(buf: bytes, at: int, count: int) -> tuple[list[int], int]:
    """Start offsets of ``count`` length-prefixed strings from byte ``at``, and the end.
    One tight loop (SmolLM2's 49,920 tokens: ~10 ms); a length past the end is
    caught by the caller (offsets only grow, so checking the end checks them all)."""
    starts = [0] * count
    for i in range(count):
        (n,) = _U64(buf, at)
        at += 8
        starts[i] = at
        at += n
    return starts, at


def _skip(buf: bytes, at: int, count: int) -> int:
    """The end of ``count`` length-prefixed strings from byte ``at`` (as :func:`_walk`)."""
    for _ in range(count):
        at += 8 + _U64(buf, at)[0]
    return at


@dataclass(frozen=True)
class _Array:
    etype: int
    count: int
    start: int
    spans: tuple[np.ndarray, np.ndarray] | None  # (starts, lengths) of string elements


class GGUFStore:
    """The tensors, metadata and token list of one ``.gguf`` file."""

    dequantizes = True  # every dtype it reports is a float format it dequantizes

    def __init__(self, path: str | Path, source: ByteSource | None = None) -> None:
        """``source``: where the bytes come from (a URL's ranges); the file ``path`` if None."""
        self.path = Path(path) if source is None else source.where
        self.source = LocalFile(self.path) if source is None else source
        self._gguf = load_gguf_package(self.path)
        self._size = self.source.size()
        if self._size == 0:
            raise InputError(self.path, "not a GGUF file (empty)")
        self.metadata: dict[str, object] = {}
        self._arrays: dict[str, _Array] = {}
        self.tensors: dict[str, TensorInfo] = {}
        header = _Header(self.source, self._size)
        self.data_offset = self._parse(header)
        header.grow(self.data_offset)  # the alignment padding, hashed with the header
        self._head = header.buf  # metadata values (the token list) are read from here
        self.digest = new_digest(self._head[: self.data_offset])
        arch = self.metadata.get("general.architecture", "?")
        self.description = f"GGUF file {str(self.path).rsplit('/', 1)[-1]} ({arch})"
        self._check_token_list()

    def _parse(self, h: _Header) -> int:
        if len(h.buf) < 4 or h.buf[:4] != MAGIC:
            raise InputError(self.path, "not a GGUF file (bad magic; expected b'GGUF')")
        h.at = 4
        version = h.scalar("I", "version")
        if version & 0xFFFF == 0:
            raise InputError(self.path, "big-endian GGUF files are not supported")
        if version not in (2, 3):
            raise InputError(self.path, f"GGUF version {version} is not supported (2 or 3)")
        n_tensors, n_kv = h.scalar("Q", "tensor count"), h.scalar("Q", "metadata count")
        if n_tensors > self._size or n_kv > self._size:
            raise InputError(self.path, "corrupt GGUF header: counts larger than the file")
        for _ in range(n_kv):
            key = h.string("metadata key")
            value = h.value(h.scalar("I", f"type of '{key}'"), key)
            if isinstance(value, _Array):
                self._arrays[key] = value
            else:
                self.metadata[key] = value
        infos = [self._tensor_info(h) for _ in range(n_tensors)]
        alignment = self.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
            raise InputError(self.path, f"general.alignment {alignment!r} is not a power of two")
        start = -(-h.at // alignment) * alignment
        for name, ne, type_name, type_id, rel, n_bytes, row_bytes in infos:
            if name in self.tensors:
                raise InputError(self.path, f"tensor '{name}' appears twice")
            if rel % alignment:
                raise InputError(self.path, f"tensor '{name}' offset {rel} is not aligned")
            end = start + rel + n_bytes
            if end > self._size:
                raise InputError(
                    self.path,
                    f"tensor '{name}' data ends at byte {end}, past the end of the file "
                    f"({self._size} bytes): truncated",
                )
            self.tensors[name] = TensorInfo(
                name, ne, type_name, type_id, start + rel, n_bytes, row_bytes
            )
        return start

    def _tensor_info(self, h: _Header) -> tuple:
        name = h.string("tensor name")
        n_dims = h.scalar("I", f"dimensions of '{name}'")
        if not 1 <= n_dims <= 4:
            raise InputError(self.path, f"tensor '{name}' has {n_dims} dimensions (1 to 4)")
        ne = tuple(h.scalar("Q", f"shape of '{name}'") for _ in range(n_dims))
        type_id = h.scalar("I", f"type of '{name}'")
        rel = h.scalar("Q", f"offset of '{name}'")
        try:
            qtype = self._gguf.GGMLQuantizationType(type_id)
            block, type_size = self._gguf.GGML_QUANT_SIZES[qtype]
        except (ValueError, KeyError):
            raise InputError(
                self.path, f"tensor '{name}' has unknown ggml type {type_id}"
            ) from None
        if ne[0] % block:
            raise InputError(
                self.path,
                f"tensor '{name}' has rows of {ne[0]} values, not a whole number of "
                f"{qtype.name} blocks of {block}: wrong shape",
            )
        row_bytes = ne[0] // block * type_size
        n_rows = int(np.prod(ne[1:], dtype=np.int64)) if n_dims > 1 else 1
        return (name, ne, qtype.name, type_id, rel, n_rows * row_bytes, row_bytes)

    # -- the TensorStore questions --------------------------------------------------

    def names(self) -> list[str]:
        return list(self.tensors)

    def file_of(self, name: str) -> Path:
        return self.path

    def _info(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise InputError(self.path, f"no tensor named '{name}'") from None

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(reversed(self._info(name).ne))  # numpy order: (vocab, d)

    def dtype(self, name: str) -> str:
        """The ggml type's name (``Q4_K``, ``F16``...), when gguf-py can dequantize it."""
        info = self._info(name)
        if info.type_name in _INTEGER_TYPES:
            raise InputError(self.path, f"tensor '{name}' holds integers ({info.type_name})")
        self._dequantize(name, np.zeros((1, info.row_bytes), np.uint8))  # one row: supported?
        return info.type_name

    def _dequantize(self, name: str, raw: np.ndarray) -> np.ndarray:
        info = self.tensors[name]
        qtype = self._gguf.GGMLQuantizationType(info.type_id)
        try:
            out = self._gguf.quants.dequantize(raw, qtype)
        except NotImplementedError:
            version = getattr(self._gguf, "__version__", None) or _dist_version()
            raise InputError(
                self.path,
                f"tensor '{name}' has type {info.type_name}, which gguf {version} cannot "
                "dequantize (upgrade gguf, or convert the file to another type)",
            ) from None
        return out.reshape(raw.shape[0], info.ne[0])

    def _n_rows(self, name: str) -> int:
        info = self._info(name)
        return info.n_bytes // info.row_bytes

    def read_rows(self, name: str, rows: np.ndarray, float32: bool = False) -> np.ndarray:
        """(k, d) float64 (float32 when asked: exact, ggml dequantizes to float32): rows
        ``rows`` dequantized as llama.cpp does."""
        info, n_rows = self._info(name), self._n_rows(name)
        rows = checked_rows(rows, n_rows, self.path, name)
        raw = read_rows(self.source, info.offset, info.row_bytes, rows)  # (k, row bytes)
        self.digest.update(raw.data)
        out = self._dequantize(name, raw)
        return out if float32 and out.dtype == np.float32 else out.astype(np.float64)

    def read_block(self, name: str, start: int, stop: int, float32: bool = False) -> np.ndarray:
        info = self._info(name)
        start, stop, _ = slice(start, stop).indices(self._n_rows(name))
        n = max(stop - start, 0)
        (data,) = self.source.read([(info.offset + start * info.row_bytes, n * info.row_bytes)])
        raw = np.frombuffer(data, np.uint8).reshape(n, info.row_bytes)
        self.digest.update(raw.data)
        out = self._dequantize(name, raw)  # float32: exact, it is what ggml computes in
        return out if float32 else out.astype(np.float64)

    def digests(self) -> dict[str, str]:
        return {str(self.path): digest_text(self.digest)}

    # -- what a checkpoint folder keeps beside the weights ------------------------

    def config(self) -> dict:
        """The config.json fields geodiag checks, from the metadata: the width, and tied
        when no ``output.weight`` is stored (llama.cpp's converter drops a tied head)."""
        arch = self.metadata.get("general.architecture")
        width = self.metadata.get(f"{arch}.embedding_length")
        config: dict = {"tie_word_embeddings": OUTPUT_HEAD not in self.tensors}
        if isinstance(width, int):
            config["hidden_size"] = width
        return config

    def _strings(self, key: str) -> _Array | None:
        arr = self._arrays.get(key)
        if arr is not None and (arr.etype != _STRING or arr.spans is None):
            raise InputError(self.path, f"metadata '{key}' is not an array of strings")
        return arr

    def _string_at(self, arr: _Array, i: int) -> str:
        starts, lengths = arr.spans
        s, n = int(starts[i]), int(lengths[i])
        return self._head[s : s + n].decode("utf-8", errors="replace")

    def token_types(self) -> np.ndarray | None:
        arr = self._arrays.get("tokenizer.ggml.token_type")
        if arr is None:
            return None
        if arr.etype not in (4, 5):  # (u)int32, as llama.cpp writes it
            raise InputError(self.path, "tokenizer.ggml.token_type is not an int32 array")
        return np.frombuffer(self._head, "<i4", arr.count, arr.start).copy()

    def _check_token_list(self) -> None:
        tokens, types = self._strings(TOKENS), self.token_types()
        if tokens is None:
            return
        if types is not None and len(types) != tokens.count:
            raise InputError(
                self.path,
                f"tokenizer.ggml.token_type has {len(types)} entries but "
                f"tokenizer.ggml.tokens has {tokens.count}",
            )
        if EMBEDDING in self.tensors and self.shape(EMBEDDING)[0] != tokens.count:
            raise InputError(
                self.path,
                f"the token list has {tokens.count} tokens but '{EMBEDDING}' has "
                f"{self.shape(EMBEDDING)[0]} rows",
            )

    def token_count(self) -> int | None:
        """How many strings ``tokenizer.ggml.tokens`` holds; None without a token list."""
        tokens = self._strings(TOKENS)
        return None if tokens is None else tokens.count

    def token_string(self, i: int) -> str | None:
        """Token ``i`` of ``tokenizer.ggml.tokens``, decoded alone (no full decode); None
        outside the list (``geodiag.io.vocabulary.tokenizer.gguf_tokenizer`` builds on it)."""
        tokens = self._strings(TOKENS)
        if tokens is None or not 0 <= int(i) < tokens.count:
            return None
        return self._string_at(tokens, int(i))


def _dist_version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("gguf")
    except importlib.metadata.PackageNotFoundError:
        return "(unknown version)"


def url(remote, name: str | None, small: SmallFiles) -> RemoteCheckpoint | None:
    """A ``.gguf`` file's URL: its header and the rows asked for by ranges, the sidecar
    and codebooks beside it fetched when present (it carries its config and tokenizer)."""
    if name is None or not name.endswith(".gguf"):
        return None
    folder = fetch_small_files(remote, GGUF_SMALL_FILES)
    store = GGUFStore(remote.shown(name), remote.file(name))
    return RemoteCheckpoint(folder, store, remote.where, [folder])


FORMAT = Format(
    name="GGUF",
    what="a `.gguf` file (llama.cpp's export), rows dequantized by llama.cpp's `gguf` package",
    find=lambda path: path if path.is_file() and path.suffix == ".gguf" else None,
    open=lambda found, asked: GGUFStore(found),
    url=url,
    files=(r"[^/]*\.gguf",),
    url_suffixes=(".gguf",),
)
