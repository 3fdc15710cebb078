"""A ``torch.save`` archive read without torch and without running any code it carries.

``torch.save`` (format 1.0 and later) writes an uncompressed zip: ``<prefix>/data.pkl``, a
pickle of the saved object whose tensors are ``_rebuild_tensor_v2`` of a typed storage
(the storage offset, size and stride), ``<prefix>/data/<key>`` the raw little-endian values
of each storage, and ``<prefix>/byteorder``. :func:`open_archive` reads the zip's
directory and ``data.pkl`` (a few hundred bytes to a few kB), unpickled by
:class:`Restricted`, which knows only the globals it is given (inert stand-ins, never
the real classes) and refuses any other; the values are then read by byte range
(:meth:`Archive.data_begin`), so a caller reads only the rows it needs. The archive is
read through a :class:`~geodiag.io.sources.byte_ranges.ByteSource`, a file on disk or behind a URL:
its first and last :data:`ARCHIVE_EDGE` bytes together (the directory, ``data.pkl`` and
the first values' local header, for one tensor), so behind a URL a small archive's
directory costs one request.

What reads through it: ``geodiag.io.formats.dcp`` (each chunk of a ``.distcp`` file is such an
archive) and ``geodiag.io.formats.zero`` (DeepSpeed's ``*_states.pt`` and universal ``fp32.pt``).
"""

from __future__ import annotations

import io
import pickle
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.io.formats.safetensors import bf16_to_float32
from geodiag.io.formats.tensor_store import checked_rows
from geodiag.io.sources.byte_ranges import ByteSource

# A storage class (torch.save's typed storages) -> dtype name (safetensors').
STORAGES = {
    "DoubleStorage": "F64",
    "FloatStorage": "F32",
    "HalfStorage": "F16",
    "BFloat16Storage": "BF16",
    "LongStorage": "I64",
    "IntStorage": "I32",
    "ShortStorage": "I16",
    "CharStorage": "I8",
    "ByteStorage": "U8",
    "BoolStorage": "BOOL",
}
# The dtypes read as rows: numpy dtype of the stored bytes (BF16 decoded by hand).
ROW_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2"}
# Every stored dtype read whole by Archive.values (a SID map's integer codes among them).
VALUE_DTYPES = {
    **ROW_DTYPES,
    "I64": "<i8",
    "I32": "<i4",
    "I16": "<i2",
    "I8": "i1",
    "U8": "u1",
    "BOOL": "?",
}
_ZIP_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, ..., name length, extra length
# Bytes read at each end of an archive to find its values: torch.save's directory (7
# members, ~560 bytes, for one tensor) and its data.pkl and the data's local header (~700
# bytes, the data aligned to 64) fit with room; anything else zipfile asks for is read as
# asked (a many-tensor archive's longer directory and data.pkl).
ARCHIVE_EDGE = 2048


class Record:
    """An inert stand-in for a pickled class (DCP's dataclasses, DeepSpeed's records):
    attributes from the pickled state, nothing of the class run."""

    fields: tuple[str, ...] = ()

    def __setstate__(self, state: object) -> None:
        if isinstance(state, dict):
            self.__dict__.update(state)
        elif (
            isinstance(state, tuple)
            and len(state) == 2
            and isinstance(state[0], dict | None)
            and isinstance(state[1], dict)
        ):  # a dataclass with __slots__: (dict, slots)
            self.__dict__.update({**(state[0] or {}), **state[1]})
        elif isinstance(state, tuple) and len(state) == len(self.fields):
            self.__dict__.update(zip(self.fields, state, strict=True))  # TensorProperties
        else:
            raise pickle.UnpicklingError(f"unexpected state for {type(self).__name__}")


def record(name: str, fields: tuple[str, ...] = ()) -> type[Record]:
    """A :class:`Record` class named ``name`` (``fields``: the names of a tuple state)."""
    return type(name, (Record,), {"fields": fields})


def torch_size(dims: object = ()) -> tuple[int, ...]:
    """``torch.Size(dims)`` as a tuple of ints."""
    if not (isinstance(dims, tuple | list) and all(type(d) is int and d >= 0 for d in dims)):
        raise pickle.UnpicklingError(f"torch.Size of {dims!r}")
    return tuple(dims)


@dataclass(frozen=True)
class StoredTensor:
    """One tensor of ``data.pkl``: its storage's dtype and key, and the view of it."""

    dtype: str
    key: str
    storage_offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]

    @property
    def numel(self) -> int:
        n = 1
        for s in self.size:
            n *= s
        return n

    def contiguous(self) -> bool:
        """Row-major over its storage (any stride of a dimension of size 1 is moot)."""
        expected = 1
        for size, stride in reversed(list(zip(self.size, self.stride, strict=True))):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True


def _rebuild_tensor_v2(storage, storage_offset, size, stride, *_):  # noqa: ANN001, ANN002
    dtype, key = storage
    return StoredTensor(dtype, key, int(storage_offset), torch_size(size), torch_size(stride))


class StateDict(dict):
    """What a pickled ``OrderedDict`` becomes: a dict that also takes the attributes a
    module's state dict carries (``_metadata``), which the pickle sets after its items."""


def ordered_dict(*args: object) -> StateDict:
    """``collections.OrderedDict()``: an empty dict (the pickle fills it with SETITEMS)."""
    if args:
        raise pickle.UnpicklingError("a non-empty OrderedDict (backward hooks)")
    return StateDict()


# The globals of a pickled plain tensor (a chunk of a .distcp file holds nothing else).
TENSOR_GLOBALS: dict[tuple[str, str], object] = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("collections", "OrderedDict"): ordered_dict,
    **{("torch", name): dtype for name, dtype in STORAGES.items()},
}


class _Refused(pickle.UnpicklingError):
    def __init__(self, module: str, name: str) -> None:
        self.what = f"{module}.{name}"
        super().__init__(self.what)


class Restricted(pickle.Unpickler):
    """An unpickler whose globals come only from ``allowed`` (inert stand-ins, never the
    real classes), so a pickle can build records and tuples but call nothing else."""

    def __init__(self, data: bytes, allowed: dict[tuple[str, str], object]) -> None:
        super().__init__(io.BytesIO(data))
        self._allowed = allowed

    def find_class(self, module: str, name: str) -> object:
        try:
            return self._allowed[(module, name)]
        except KeyError:
            raise _Refused(module, name) from None

    def persistent_load(self, pid: object) -> object:
        # torch.save's storages: ('storage', storage type, key, location, numel)
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise pickle.UnpicklingError(f"unexpected persistent id {pid!r}")
        if pid[1] not in STORAGES.values():
            raise pickle.UnpicklingError(f"storage type {pid[1]!r}")
        return pid[1], str(pid[2])


def restricted_load(
    data: bytes, where: str | Path, allowed: dict[tuple[str, str], object], writer: str
) -> object:
    """Unpickle ``data`` with only ``allowed`` globals; InputError naming ``where`` and the
    refused global otherwise (``writer``: whose classes the allowed ones are)."""
    try:
        return Restricted(data, allowed).load()
    except _Refused as e:
        raise InputError(
            where,
            f"refused: the pickle asks for '{e.what}', which is not one of the classes "
            f"{writer} writes (nothing in it was run)",
        ) from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as e:
        raise InputError(
            where, f"not a readable {writer} pickle ({e.__class__.__name__}: {e})"
        ) from None
    except RecursionError:
        raise InputError(where, f"not a readable {writer} pickle (nested too deeply)") from None


class _Window(io.RawIOBase):
    """Bytes ``begin .. begin + length`` of a :class:`~geodiag.io.sources.byte_ranges.ByteSource`,
    as a file of their own (what ``zipfile`` reads an archive through: its directory, not
    its data). Its first and last :data:`ARCHIVE_EDGE` bytes are read at once, in one call
    (one request behind a URL); any other read as asked."""

    def __init__(self, source: ByteSource, begin: int, length: int) -> None:
        self._source, self.begin, self.length, self._at = source, begin, length, 0
        edge = min(ARCHIVE_EDGE, length)
        spans = [(0, length)] if 2 * edge >= length else [(0, edge), (length - edge, edge)]
        data = source.read([(begin + offset, n) for offset, n in spans])
        self._edges = [(offset, d) for (offset, _), d in zip(spans, data, strict=True)]

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._at, 2: self.length}[whence]
        self._at = max(0, min(base + offset, self.length))
        return self._at

    def tell(self) -> int:
        return self._at

    def readinto(self, b) -> int:  # noqa: ANN001
        n = max(0, min(len(b), self.length - self._at))
        if n == 0:
            return 0
        at = self._at
        for offset, held in self._edges:
            if offset <= at and at + n <= offset + len(held):
                data = held[at - offset : at - offset + n]
                break
        else:
            data = self._source.read([(self.begin + at, n)])[0]
        b[: len(data)] = data
        self._at += len(data)
        return len(data)


class Archive:
    """A ``torch.save`` archive's object (``data.pkl``, tensors as :class:`StoredTensor`;
    ``pickled``: its bytes) and where each storage's values lie in its file (located when
    first asked: a 30-byte local zip header each, from the edges already read when there).
    ``where``: the file as shown, a path or a URL."""

    def __init__(
        self,
        window: _Window,
        where: str,
        obj: object,
        pickled: bytes,
        members: dict[str, zipfile.ZipInfo],
    ) -> None:
        self._window, self.where, self.obj, self.pickled = window, where, obj, pickled
        self._members = members
        self._located: dict[str, int] = {}

    def _storage(self, key: str, what: str) -> tuple[int, int]:
        """(absolute byte offset, byte length) of storage ``key``'s values."""
        try:
            m = self._members[key]
        except KeyError:
            raise InputError(self.where, f"{what}: its storage {key} is missing") from None
        if key not in self._located:
            w = self._window
            w.seek(m.header_offset)
            try:
                sig, n_name, n_extra = _ZIP_LOCAL_HEADER.unpack(w.read(30))
            except struct.error:
                raise InputError(
                    self.where, f"{what}: the file ends inside its zip entry"
                ) from None
            if sig != b"PK\x03\x04" or m.compress_type != zipfile.ZIP_STORED:
                raise InputError(self.where, f"{what}: its values are not stored uncompressed")
            start = m.header_offset + 30 + n_name + n_extra
            if start + m.file_size > w.length:
                raise InputError(self.where, f"{what}: the file ends inside its values")
            self._located[key] = w.begin + start
        return self._located[key], m.file_size

    def data_begin(self, t: StoredTensor, what: str) -> int:
        """The absolute byte offset of ``t``'s first element, after checking that its
        storage holds all of ``t`` row-major (InputError naming ``what`` otherwise)."""
        if t.dtype not in ROW_DTYPES:
            raise InputError(self.where, f"{what}: dtype {t.dtype}, not a float the rows read")
        itemsize = np.dtype(ROW_DTYPES[t.dtype]).itemsize
        begin, length = self._storage(t.key, what)
        if not t.contiguous():
            raise InputError(self.where, f"{what}: not row-major (stride {list(t.stride)})")
        if (t.storage_offset + t.numel) * itemsize > length:
            raise InputError(self.where, f"{what}: its storage is shorter than the shape")
        return begin + t.storage_offset * itemsize

    def values(self, t: StoredTensor, what: str) -> np.ndarray:
        """All of ``t``'s values, of any stored dtype (BF16 as float32), in its shape: for a
        small tensor read whole (a codebook, a SID map's codes), not row by row."""
        begin, length = self._storage(t.key, what)
        dtype = np.dtype(VALUE_DTYPES[t.dtype])
        end = t.storage_offset + (
            1 + sum((n - 1) * s for n, s in zip(t.size, t.stride, strict=True)) if t.numel else 0
        )
        if end * dtype.itemsize > length:
            raise InputError(self.where, f"{what}: its storage is shorter than the shape")
        raw = self._window._source.read([(begin, length)])[0] if length else b""
        flat = np.frombuffer(raw, dtype=dtype, count=length // dtype.itemsize)
        strides = tuple(s * dtype.itemsize for s in t.stride)
        view = np.lib.stride_tricks.as_strided(
            flat[t.storage_offset :], shape=t.size, strides=strides, writeable=False
        )
        out = np.array(view)
        return bf16_to_float32(out) if t.dtype == "BF16" else out


def open_archive(
    source: ByteSource,
    allowed: dict[tuple[str, str], object],
    writer: str,
    begin: int = 0,
    length: int | None = None,
) -> Archive:
    """The archive at bytes ``begin .. begin + length`` of ``source`` (all of it by
    default): its zip directory read and ``data.pkl`` unpickled with ``allowed`` only."""
    where = source.where
    try:
        if length is None:
            length = source.size() - begin
        window = _Window(source, begin, length)
        with zipfile.ZipFile(window) as z:
            names = z.namelist()
            pkl = next((n for n in names if n.endswith("/data.pkl")), None)
            if pkl is None:
                raise InputError(where, f"no data.pkl in the torch.save archive at byte {begin}")
            prefix = pkl.removesuffix("data.pkl")
            order = f"{prefix}byteorder"
            if order in names and z.read(order).strip() != b"little":
                raise InputError(where, "a big-endian torch.save archive")
            pickled = z.read(pkl)
            obj = restricted_load(pickled, where, allowed, writer)
            data = f"{prefix}data/"
            members = {
                i.filename.removeprefix(data): i
                for i in z.infolist()
                if i.filename.startswith(data)
            }
    except (zipfile.BadZipFile, struct.error, EOFError, KeyError) as e:
        raise InputError(where, f"at byte {begin}: not a torch.save archive ({e})") from None
    return Archive(window, where, obj, pickled, members)


def decode(dtype: str, raw: np.ndarray, float32: bool) -> np.ndarray:
    """Stored values as float64, or float32 when asked and exact (every dtype but F64)."""
    if dtype == "BF16":
        raw = bf16_to_float32(raw)
    exact32 = float32 and dtype != "F64"
    return np.asarray(raw, dtype=np.float32 if exact32 else np.float64)


class ReadsRows:
    """The store questions of a table of ``torch.save`` values (DCP's tensors, DeepSpeed's
    parameters): names, shape, dtype, ``read_rows`` and ``read_block``, from its
    ``_entries`` (name -> an entry with ``shape`` and the stored ``dtype``), ``folder``
    (named in errors) and ``_read(name, rows)`` (the entry, the raw values of the
    ascending distinct ``rows``)."""

    def names(self) -> list[str]:
        return list(self._entries)

    def _entry(self, name: str):  # noqa: ANN202  (the store's own entry type)
        try:
            return self._entries[name]
        except KeyError:
            raise InputError(self.folder, f"no tensor named '{name}'") from None

    def shape(self, name: str) -> tuple[int, ...]:
        return self._entry(name).shape

    def dtype(self, name: str) -> str:
        return self._entry(name).dtype

    def read_rows(self, name: str, rows: np.ndarray, float32: bool = False) -> np.ndarray:
        rows = checked_rows(rows, self.shape(name)[0], self.folder, name)
        unique, back = np.unique(rows, return_inverse=True)
        entry, raw = self._read(name, unique)
        return decode(entry.dtype, raw[back.reshape(-1)], float32)

    def read_block(self, name: str, start: int, stop: int, float32: bool = False) -> np.ndarray:
        stop = min(stop, self.shape(name)[0])
        entry, raw = self._read(name, np.arange(start, max(stop, start), dtype=np.int64))
        return decode(entry.dtype, raw, float32)
