"""A validating, read-only safetensors reader on numpy, plus a small writer.

Why not the ``safetensors`` package: its numpy backend has no bfloat16, and its
errors on a damaged file do not say which tensor lies. Here the header is checked
against the file's real size before anything is read, rows are read with
explicit reads of just their bytes, and every
problem raises :class:`InputError` naming the file.

Format: 8-byte little-endian header length N, N bytes of JSON header
(``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}``),
then the data buffer; offsets are relative to the buffer's start.

What is checked where: the whole header's structure at open (one object per name, no
name twice, shapes and offsets well-formed, sizes right for every dtype the format
defines, inside the file, no two tensors sharing bytes); a tensor's dtype only when it
is read, so one FP8 or U32 layer elsewhere in a checkpoint does not reject it.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from geodiag.atomic import atomic_path
from geodiag.errors import InputError, nested_too_deeply
from geodiag.io.formats.tensor_store import checked_rows, new_digest
from geodiag.io.sources.byte_ranges import ByteSource, LocalFile, read_rows
from geodiag.io.sources.layouts import check_not_lfs_pointer

# dtype name -> numpy dtype of the stored bytes, for the dtypes geodiag decodes
_DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),  # decoded by hand: the upper half of a float32
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
# FP8 dtypes decoded through ml_dtypes (an optional dependency): safetensors name ->
# ml_dtypes name. Both are exact in float32.
_FP8_DTYPES = {"F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}
# Bits per element of every dtype the format defines (safetensors' ``Dtype``), so a
# tensor's byte size is checked even when geodiag cannot decode it.
_FORMAT_BITS = {
    name: bits
    for bits, names in (
        (4, ("F4",)),
        (6, ("F6_E2M3", "F6_E3M2")),
        (8, ("BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ")),
        (16, ("I16", "U16", "F16", "BF16")),
        (32, ("I32", "U32", "F32")),
        (64, ("I64", "U64", "F64", "C64")),
    )
    for name in names
}
FLOAT_DTYPES = ("F64", "F32", "F16", "BF16", *_FP8_DTYPES)
MAX_HEADER_BYTES = 100 * 1024 * 1024  # the reference implementation's own limit
# read_rows decodes this many rows at a time when asked for more (8192 x 1,024 float32: 32 MB).
_DECODE_ROWS = 8192


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int  # absolute byte offset in the file
    end: int


class _DuplicateKey(Exception):
    pass


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """``json.loads`` hook: an object, refusing a key given twice."""
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def bf16_to_float32(raw: np.ndarray) -> np.ndarray:
    """uint16 bfloat16 bit patterns -> float32 (exact: bf16 is float32's top half)."""
    return (raw.astype(np.uint32) << 16).view(np.float32)


def float32_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> uint16 bfloat16 bit patterns, round-to-nearest-even (NaN kept NaN)."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = np.isnan(x)
    out = rounded.astype(np.uint16)
    out[nan] = 0x7FC0
    return out


class SafetensorsFile:
    """One ``.safetensors`` file, header validated at open; reads rows on demand.

    ``digest`` accumulates the digest (``new_digest``) over the header and every byte range
    read, in read order: provenance for "which bytes did this report look at".
    """

    def __init__(self, path: str | os.PathLike[str], source: ByteSource | None = None) -> None:
        """``source``: where the bytes come from (a URL's ranges); the file ``path`` if None."""
        self.path = Path(path) if source is None else source.where
        self.source = LocalFile(self.path) if source is None else source
        size = self.source.size()
        if source is None:
            check_not_lfs_pointer(self.path)
        if size < 8:
            raise InputError(
                self.path, f"truncated: {size} bytes, too short for a safetensors header"
            )
        (n,) = struct.unpack("<Q", self.source.read([(0, 8)])[0])
        if n > MAX_HEADER_BYTES or 8 + n > size:
            raise InputError(
                self.path,
                f"corrupt or truncated: header claims {n} bytes but the file has {size - 8} after the length field",
            )
        raw_header = self.source.read([(8, n)])[0]
        self.digest = new_digest(raw_header)
        try:
            header = json.loads(raw_header.decode("utf-8"), object_pairs_hook=_unique_keys)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise InputError(
                self.path, f"corrupt header: not valid JSON ({e.__class__.__name__})"
            ) from None
        except _DuplicateKey as e:
            # Which entry counts depends on the reader (the last, in Python's json and in
            # safetensors 0.8): the same bytes could pass with one tool, fail with another.
            raise InputError(
                self.path,
                f"corrupt header: the name '{e.args[0]}' appears twice in the JSON header",
            ) from None
        except RecursionError:
            raise nested_too_deeply(self.path, "corrupt header: JSON") from None
        if not isinstance(header, dict):
            raise InputError(self.path, "corrupt header: not a JSON object")
        self.metadata: dict[str, str] = header.pop("__metadata__", None) or {}
        self._data_start = 8 + n
        data_len = size - self._data_start
        self.tensors: dict[str, TensorInfo] = {}
        for name, entry in header.items():
            self.tensors[name] = self._check_entry(name, entry, data_len)
        self._check_no_overlap()
        self._check_covered(data_len)

    def _check_entry(self, name: str, entry: object, data_len: int) -> TensorInfo:
        if not isinstance(entry, dict):
            raise InputError(
                self.path, f"corrupt header: entry for tensor '{name}' is not an object"
            )
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if not isinstance(dtype, str):
            raise InputError(self.path, f"tensor '{name}': bad dtype {dtype!r}")
        if not (isinstance(shape, list) and all(isinstance(s, int) and s >= 0 for s in shape)):
            raise InputError(self.path, f"tensor '{name}': bad shape {shape!r}")
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(isinstance(o, int) and o >= 0 for o in offsets)
            and offsets[0] <= offsets[1]
        ):
            raise InputError(self.path, f"tensor '{name}': bad data_offsets {offsets!r}")
        begin, end = offsets
        bits = _FORMAT_BITS.get(dtype)  # a dtype newer than this table: size unchecked
        if bits is not None and (end - begin) * 8 != math.prod(shape) * bits:
            raise InputError(
                self.path,
                f"header lies about tensor '{name}': shape {shape} {dtype} needs "
                f"{math.prod(shape) * bits / 8:g} bytes, data_offsets span {end - begin}",
            )
        if end > data_len:
            raise InputError(
                self.path,
                f"truncated: tensor '{name}' ends at byte {end} of the data buffer, "
                f"but the file holds only {data_len} bytes of data",
            )
        return TensorInfo(
            name, dtype, tuple(shape), self._data_start + begin, self._data_start + end
        )

    def _check_no_overlap(self) -> None:
        """No two tensors share bytes: the header would be describing one range twice."""
        spans = sorted((t.begin, t.end, t.name) for t in self.tensors.values() if t.end > t.begin)
        for (_, end_a, a), (begin_b, _, b) in zip(spans, spans[1:], strict=False):
            if begin_b < end_a:
                raise InputError(
                    self.path,
                    f"corrupt header: tensors '{a}' and '{b}' overlap in the data buffer",
                )

    def _check_covered(self, data_len: int) -> None:
        """The tensors tile the data buffer, as the safetensors library requires (it rejects
        a gap as an invalid offset and trailing bytes as "file not fully covered")."""
        at = 0
        for t in sorted(self.tensors.values(), key=lambda t: (t.begin, t.end)):
            begin = t.begin - self._data_start
            if begin != at:
                raise InputError(
                    self.path,
                    f"corrupt header: tensor '{t.name}' starts at byte {begin} of the data "
                    f"buffer, where the bytes before it end at {at} (a gap: the safetensors "
                    "library refuses the file)",
                )
            at = t.end - self._data_start
        if at != data_len:
            raise InputError(
                self.path,
                f"corrupt header: the file holds {data_len - at} bytes after its last tensor "
                "(the header does not cover the data: the safetensors library refuses the file)",
            )

    def _numpy_dtype(self, info: TensorInfo) -> np.dtype:
        """The numpy dtype of a tensor's stored bytes; checked here, when the tensor is read."""
        if info.dtype in _DTYPES:
            return _DTYPES[info.dtype]
        if info.dtype in _FP8_DTYPES:
            try:
                import ml_dtypes
            except ImportError:
                raise InputError(
                    self.path,
                    f"tensor '{info.name}' is {info.dtype}: reading float8 needs ml_dtypes "
                    "(pip install ml_dtypes, or geodiag[fp8])",
                ) from None
            return np.dtype(getattr(ml_dtypes, _FP8_DTYPES[info.dtype]))
        readable = ", ".join([*_DTYPES, *_FP8_DTYPES])
        raise InputError(
            self.path,
            f"tensor '{info.name}' has dtype {info.dtype}, which geodiag cannot read "
            f"(it reads {readable})",
        )

    def keys(self) -> list[str]:
        return list(self.tensors)

    def info(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise InputError(self.path, f"no tensor named '{name}'") from None

    def _pread(self, offset: int, nbytes: int) -> bytes:
        return self.source.read([(offset, nbytes)])[0]

    def _raw_rows(
        self, info: TensorInfo, rows: np.ndarray, dt: np.dtype | None = None
    ) -> np.ndarray:
        """Stored rows, in the order asked, read with one pread per run of adjacent rows
        (as ``dt`` when given: the words of a packed tensor, which has no float decoding).

        Explicit reads rather than a memory map: a map's page faults pull in the kernel's
        readahead (~128-256 KB) around every scattered row and all of it counts as the
        process's memory; reading 384 rows of SmolLM2 that way cost 92 MB.
        """
        dt = self._numpy_dtype(info) if dt is None else dt
        width = math.prod(info.shape[1:])
        raw = read_rows(self.source, info.begin, width * dt.itemsize, rows)
        out = raw.view(dt)
        return out.reshape((len(rows), *info.shape[1:]))

    def _decode(self, info: TensorInfo, raw: np.ndarray, float32: bool = False) -> np.ndarray:
        """Stored values as float64, or with ``float32`` as float32 when that is exact
        (F32, F16, BF16, FP8; F64 stays float64)."""
        self.digest.update(np.ascontiguousarray(raw).reshape(-1).view(np.uint8).data)  # no copy
        if info.dtype == "BF16":
            raw = bf16_to_float32(raw)
        exact32 = float32 and info.dtype != "F64"
        return np.asarray(raw, dtype=np.float32 if exact32 else np.float64)

    def read(self, name: str) -> np.ndarray:
        """The whole tensor as float64 (small tensors: codebooks, tests)."""
        info = self.info(name)
        dt = self._numpy_dtype(info)
        raw = np.frombuffer(self._pread(info.begin, info.end - info.begin), dtype=dt)
        return self._decode(info, raw.reshape(info.shape))

    def _row_ids(self, info: TensorInfo, rows: np.ndarray) -> np.ndarray:
        """``rows`` as int64, each inside the tensor's first dimension."""
        return checked_rows(rows, info.shape[0], self.path, info.name)

    def read_rows(self, name: str, rows: np.ndarray, float32: bool = False) -> np.ndarray:
        """Rows ``rows`` (any order, 1-D int) of a 2-D tensor, as float64 ``(len(rows), d)``
        (float32 with ``float32`` when that is exact: every dtype but F64)."""
        info = self.info(name)
        if len(info.shape) != 2:
            raise InputError(
                self.path, f"tensor '{name}' has shape {list(info.shape)}, expected 2-D"
            )
        rows = self._row_ids(info, rows)
        if len(rows) <= _DECODE_ROWS:
            return self._decode(info, self._raw_rows(info, rows), float32)
        # Many rows (100,000 new tokens): read and decode a block at a time into the float64
        # result, so the stored bytes and their float32 decoding never exist for all rows
        # at once (at 1,024 dims: 410 MB each beside the 819 MB result). Same digest: the
        # blocks are hashed in the same order as the rows.
        exact32 = float32 and info.dtype != "F64"
        out = np.empty((len(rows), info.shape[1]), np.float32 if exact32 else np.float64)
        for start in range(0, len(rows), _DECODE_ROWS):
            block = rows[start : start + _DECODE_ROWS]
            raw = self._raw_rows(info, block)
            out[start : start + len(block)] = self._decode(info, raw, float32)
        return out

    def read_words(self, name: str, rows: np.ndarray) -> np.ndarray:
        """Rows ``rows`` of a 2-D U32 tensor as stored, uint32 ``(len(rows), width)``: the
        packed integers of a quantized matrix (MLX's), which the float readers refuse.
        Hashed into ``digest`` like every read."""
        info = self.info(name)
        if info.dtype != "U32" or len(info.shape) != 2:
            raise InputError(
                self.path,
                f"tensor '{name}' is {info.dtype} {list(info.shape)}, expected 2-D U32 "
                "(packed quantized words)",
            )
        rows = self._row_ids(info, rows)
        words = self._raw_rows(info, rows, np.dtype("<u4"))
        self.digest.update(words.reshape(-1).view(np.uint8).data)
        return words

    def read_block(self, name: str, start: int, stop: int, float32: bool = False) -> np.ndarray:
        """Contiguous rows ``start:stop`` of a 2-D tensor, as float64 (float32 when asked and
        exact), read with one read."""
        info = self.info(name)
        stop = min(stop, info.shape[0])
        width = math.prod(info.shape[1:])
        dt = self._numpy_dtype(info)
        n = max(stop - start, 0)
        data = self._pread(info.begin + start * width * dt.itemsize, n * width * dt.itemsize)
        raw = np.frombuffer(data, dtype=dt).reshape(n, width)
        return self._decode(info, raw, float32)


def _as_storable(name: str, x: np.ndarray, dtype: str | None) -> tuple[str, bytes]:
    x = np.asarray(x)
    if dtype is None:
        dtype = {
            np.dtype("f8"): "F64",
            np.dtype("f4"): "F32",
            np.dtype("f2"): "F16",
            np.dtype("i8"): "I64",
            np.dtype("i4"): "I32",
        }.get(x.dtype)
        if dtype is None:
            raise ValueError(f"tensor '{name}': cannot store numpy dtype {x.dtype}; pass dtype=")
    if dtype == "BF16":
        data = float32_to_bf16(x.astype(np.float32))
    else:
        data = np.ascontiguousarray(x, dtype=_DTYPES[dtype])
    return dtype, data.astype(data.dtype.newbyteorder("<")).tobytes()


def save_file(
    tensors: dict[str, np.ndarray],
    path: str | os.PathLike[str],
    *,
    metadata: dict[str, str] | None = None,
    dtype: str | None = None,
) -> Path:
    """Write a safetensors file atomically; ``dtype`` (e.g. ``"BF16"``) overrides all tensors."""
    header: dict[str, object] = {}
    blobs: list[bytes] = []
    offset = 0
    for name, x in tensors.items():
        stored, blob = _as_storable(name, x, dtype)
        header[name] = {
            "dtype": stored,
            "shape": list(np.shape(x)),
            "data_offsets": [offset, offset + len(blob)],
        }
        blobs.append(blob)
        offset += len(blob)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (
        -len(raw) % 8
    )  # keep the data buffer 8-byte aligned, as the reference writer does
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(p) as tmp, open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for blob in blobs:
            f.write(blob)
    return p
