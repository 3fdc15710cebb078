"""A torch.distributed.checkpoint (DCP) folder read in place: ``.metadata`` + ``*.distcp``,
as FSDP2's ``dcp.save`` writes it (also a Trainer's ``pytorch_model_fsdp_0/``), without
torch and without running any code the files carry.

What torch (2.13) writes:

- ``.metadata``: a pickle of ``torch.distributed.checkpoint.metadata.Metadata``:
  ``state_dict_metadata`` (flat name -> ``TensorStorageMetadata(properties, size, chunks)``
  with ``ChunkStorageMetadata(offsets, sizes)`` per saved shard, or
  ``BytesStorageMetadata`` for a non-tensor), ``storage_data`` (``MetadataIndex(fqn,
  offset, index)`` -> ``_StorageInfo(relative_path, offset, length, ...)``) and
  ``planner_data`` (flat name -> its path in the nested state dict). It is unpickled by
  :class:`_Restricted`, which knows exactly the globals DCP writes (:data:`_METADATA_GLOBALS`)
  and builds inert records for them; any other global is refused.
- each chunk, at (offset, length) of its ``.distcp`` file: a ``torch.save`` archive, an
  uncompressed zip holding ``archive/data.pkl`` (``_rebuild_tensor_v2`` of a typed storage:
  the storage offset, size and stride) and ``archive/data/<key>``, the raw little-endian
  values. The zip's directory and ``data.pkl`` (restricted the same way,
  :data:`_CHUNK_GLOBALS`) are read once per chunk; then only the byte ranges of the rows
  asked for, so a row-sharded embedding (FSDP2: chunk r holds rows r*n/w ..) costs the rows'
  bytes in the one or few chunks that hold them.

Names: a nested state dict (``{"model": ..., "optim": ...}``, accelerate's ``{"model":
...}``) exposes the tensors under ``model`` by their names in it; optimizer state
(``exp_avg``, ``step``) is never exposed, so it cannot be taken for the embedding, and a
folder of optimizer state alone (accelerate's ``optimizer_0/``) is an error that names the
model's folder beside it.
"""

from __future__ import annotations

import hashlib
import io
import math
import pickle
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np

from geodiag.errors import InputError, cannot_read
from geodiag.io.byte_ranges import LocalFile
from geodiag.io.layouts import check_not_lfs_pointer
from geodiag.io.safetensors import bf16_to_float32

METADATA = ".metadata"
# torch dtype name -> the dtype name geodiag uses (safetensors'), for the dtypes DCP stores.
_TORCH_DTYPES = {
    "float64": "F64",
    "float32": "F32",
    "float16": "F16",
    "bfloat16": "BF16",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint8": "U8",
    "bool": "BOOL",
    "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2",
}
# A chunk's storage class (torch.save's typed storages) -> dtype name.
_STORAGES = {
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
_ROW_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2"}
# The top-level keys of a nested state dict that hold an optimizer's state, not the model's.
_OPTIMIZER_KEYS = ("optim", "optimizer", "optimizers")
_ZIP_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, ..., name length, extra length


class _Record:
    """An inert stand-in for one of DCP's dataclasses: attributes from the pickled state."""

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


def _record(name: str, fields: tuple[str, ...] = ()) -> type[_Record]:
    return type(name, (_Record,), {"fields": fields})


def _size(dims: object = ()) -> tuple[int, ...]:
    """``torch.Size(dims)`` as a tuple of ints."""
    if not (isinstance(dims, tuple | list) and all(type(d) is int and d >= 0 for d in dims)):
        raise pickle.UnpicklingError(f"torch.Size of {dims!r}")
    return tuple(dims)


def _same(value: object) -> object:
    """``_get_layout('torch.strided')``, ``_MEM_FORMAT_ENCODING(0)``: the value itself."""
    return value


_DCP = "torch.distributed.checkpoint.metadata"
_METADATA_GLOBALS: dict[tuple[str, str], object] = {
    (_DCP, "Metadata"): _record("Metadata"),
    (_DCP, "TensorStorageMetadata"): _record("TensorStorageMetadata"),
    (_DCP, "BytesStorageMetadata"): _record("BytesStorageMetadata"),
    (_DCP, "ChunkStorageMetadata"): _record("ChunkStorageMetadata"),
    (_DCP, "TensorProperties"): _record(
        "TensorProperties", ("dtype", "layout", "requires_grad", "memory_format", "pin_memory")
    ),
    (_DCP, "MetadataIndex"): _record("MetadataIndex"),
    (_DCP, "StorageMeta"): _record("StorageMeta"),
    (_DCP, "_MEM_FORMAT_ENCODING"): _same,
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"): _record("_StorageInfo"),
    ("torch.serialization", "_get_layout"): _same,
    ("torch", "Size"): _size,
    # StorageMeta.checkpoint_id when dcp.save was given a Path (pathlib._local from 3.13)
    ("pathlib", "PosixPath"): PurePosixPath,
    ("pathlib._local", "PosixPath"): PurePosixPath,
    **{("torch", name): dtype for name, dtype in _TORCH_DTYPES.items()},
}


@dataclass(frozen=True)
class _StoredTensor:
    """What a chunk's ``data.pkl`` says: the storage's dtype and key, and the view of it."""

    dtype: str
    key: str
    storage_offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]


def _rebuild_tensor_v2(storage, storage_offset, size, stride, *_):  # noqa: ANN001, ANN002
    dtype, key = storage
    return _StoredTensor(dtype, key, int(storage_offset), _size(size), _size(stride))


def _ordered_dict(*args: object) -> dict:
    if args:
        raise pickle.UnpicklingError("a non-empty OrderedDict (backward hooks)")
    return {}


_CHUNK_GLOBALS: dict[tuple[str, str], object] = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("collections", "OrderedDict"): _ordered_dict,
    **{("torch", name): dtype for name, dtype in _STORAGES.items()},
}


class _Refused(pickle.UnpicklingError):
    def __init__(self, module: str, name: str) -> None:
        self.what = f"{module}.{name}"
        super().__init__(self.what)


class _Restricted(pickle.Unpickler):
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
        if pid[1] not in _STORAGES.values():
            raise pickle.UnpicklingError(f"storage type {pid[1]!r}")
        return pid[1], str(pid[2])


def restricted_load(data: bytes, where: Path, allowed: dict[tuple[str, str], object]) -> object:
    """Unpickle ``data`` with only ``allowed`` globals; InputError naming ``where`` and the
    refused global otherwise."""
    try:
        return _Restricted(data, allowed).load()
    except _Refused as e:
        raise InputError(
            where,
            f"refused: the pickle asks for '{e.what}', which is not one of the classes "
            "torch.distributed.checkpoint writes (nothing in it was run)",
        ) from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as e:
        raise InputError(
            where, f"not a readable DCP pickle ({e.__class__.__name__}: {e})"
        ) from None
    except RecursionError:
        raise InputError(where, "not a readable DCP pickle (nested too deeply)") from None


@dataclass(frozen=True)
class _Chunk:
    """One saved shard of a tensor: where it sits in the tensor and in which file."""

    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    path: Path
    begin: int  # byte offset of its torch.save archive in ``path``
    length: int


@dataclass(frozen=True)
class _Tensor:
    name: str  # the flat name in the checkpoint
    dtype: str
    shape: tuple[int, ...]
    chunks: tuple[_Chunk, ...]


class _Window(io.RawIOBase):
    """Bytes ``begin .. begin + length`` of an open file, as a file of their own (what
    ``zipfile`` reads a chunk's archive through: its directory, not its data)."""

    def __init__(self, f: io.BufferedReader, begin: int, length: int) -> None:
        self._f, self._begin, self._length, self._at = f, begin, length, 0

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._at, 2: self._length}[whence]
        self._at = max(0, min(base + offset, self._length))
        return self._at

    def tell(self) -> int:
        return self._at

    def readinto(self, b) -> int:  # noqa: ANN001
        n = max(0, min(len(b), self._length - self._at))
        self._f.seek(self._begin + self._at)
        data = self._f.read(n)
        b[: len(data)] = data
        self._at += len(data)
        return len(data)


@dataclass(frozen=True)
class _Located:
    """A chunk's values: their byte offset in the ``.distcp`` file and their layout."""

    data_begin: int  # absolute offset of element (0, 0, ...) of the chunk
    row_elements: int  # elements per row of the chunk (the product of sizes[1:])


def _parse_metadata(folder: Path) -> tuple[dict[str, _Tensor], bytes]:
    path = folder / METADATA
    check_not_lfs_pointer(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise cannot_read(path, e) from None
    meta = restricted_load(raw, path, _METADATA_GLOBALS)
    try:
        entries = meta.state_dict_metadata
        storage = meta.storage_data
        planner = getattr(meta, "planner_data", None) or {}
        if not (isinstance(entries, dict) and isinstance(storage, dict)):
            raise TypeError
        where = {(k.fqn, getattr(k, "offset", None)): v for k, v in storage.items()}
    except (AttributeError, TypeError):
        raise InputError(
            path, "not a DCP Metadata (needs state_dict_metadata and storage_data)"
        ) from None
    tensors: dict[str, _Tensor] = {}
    for flat, entry in entries.items():
        if type(entry).__name__ != "TensorStorageMetadata":
            continue  # BytesStorageMetadata: a pickled non-tensor (an lr, a step count)
        tensors[flat] = _tensor(path, folder, flat, entry, where)
    model = _model_names(tensors, planner)
    if tensors and not model:
        keys = sorted({str(planner.get(flat, (flat,))[0]) for flat in tensors})
        raise InputError(
            folder,
            f"holds only optimizer state ({len(tensors)} tensors under "
            f"{', '.join(repr(k) for k in keys)}), not a model's weights: pass the model's "
            "folder (accelerate and the Trainer save it beside, as pytorch_model_fsdp_0/) "
            "or the checkpoint folder above both",
        )
    return model, raw


def _tensor(path: Path, folder: Path, flat: str, entry: _Record, where: dict) -> _Tensor:
    try:
        dtype = entry.properties.dtype
        shape = _size(entry.size)
        chunks = []
        for c in entry.chunks:
            offsets, sizes = _size(c.offsets), _size(c.sizes)
            info = where[(flat, offsets)]
            if getattr(info, "transform_descriptors", None):
                raise InputError(
                    path,
                    f"tensor '{flat}' is stored transformed ({info.transform_descriptors}: "
                    "compressed by a storage extension), which geodiag does not read: save "
                    "without the extension, or consolidate with dcp_to_torch_save",
                )
            file = folder / str(info.relative_path)
            if PurePosixPath(str(info.relative_path)).name != str(info.relative_path):
                raise InputError(path, f"tensor '{flat}' names a file outside the folder")
            chunks.append(_Chunk(offsets, sizes, file, int(info.offset), int(info.length)))
    except (AttributeError, TypeError, ValueError, pickle.UnpicklingError):
        raise InputError(path, f"tensor '{flat}': malformed storage metadata") from None
    except KeyError:
        raise InputError(path, f"tensor '{flat}': a chunk with no storage entry") from None
    if not isinstance(dtype, str):
        raise InputError(path, f"tensor '{flat}': unknown dtype {dtype!r}")
    covered = 0
    for c in chunks:
        if (
            len(c.offsets) != len(shape)
            or len(c.sizes) != len(shape)
            or any(o + s > n for o, s, n in zip(c.offsets, c.sizes, shape, strict=True))
        ):
            raise InputError(
                path, f"tensor '{flat}': chunk at {list(c.offsets)} lies outside {list(shape)}"
            )
        covered += math.prod(c.sizes)
    if covered != math.prod(shape):
        raise InputError(
            path,
            f"tensor '{flat}': its chunks hold {covered} of {math.prod(shape)} values "
            "(a checkpoint saved by some ranks only?)",
        )
    return _Tensor(flat, dtype, shape, tuple(chunks))


def _model_names(tensors: dict[str, _Tensor], planner: dict) -> dict[str, _Tensor]:
    """The model's tensors by their names in the model's state dict: those under a
    top-level ``model`` key when the state dict nests one (accelerate, ``{"model": msd,
    "optim": osd}``), else every tensor outside an optimizer's key."""
    paths = {flat: tuple(str(p) for p in planner.get(flat, (flat,))) for flat in tensors}
    nested = [f for f, p in paths.items() if len(p) >= 2 and p[0] == "model"]
    if nested:
        return {".".join(paths[f][1:]): tensors[f] for f in nested}
    return {
        flat: t
        for flat, t in tensors.items()
        if not (len(paths[flat]) >= 2 and paths[flat][0] in _OPTIMIZER_KEYS)
    }


class DCPStore:
    """The tensors of a DCP folder; chunks are located lazily, rows read by byte range.

    ``digests``: sha256 of ``.metadata`` and, per ``.distcp`` file, of every byte range
    read from it, in read order.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._tensors, raw = _parse_metadata(folder)
        self._digests = {folder / METADATA: hashlib.sha256(raw)}
        self._located: dict[_Chunk, _Located] = {}
        files = sorted({c.path for t in self._tensors.values() for c in t.chunks})
        for f in files:
            if not f.is_file():
                raise InputError(folder / METADATA, f"names '{f.name}', which is missing")
        shards = f"{len(files)} .distcp file{'s' if len(files) != 1 else ''}"
        self.description = f"torch.distributed.checkpoint folder ({shards})"

    def names(self) -> list[str]:
        return list(self._tensors)

    def _get(self, name: str) -> _Tensor:
        try:
            return self._tensors[name]
        except KeyError:
            raise InputError(self.folder, f"no tensor named '{name}'") from None

    def shape(self, name: str) -> tuple[int, ...]:
        return self._get(name).shape

    def dtype(self, name: str) -> str:
        return self._get(name).dtype

    def file_of(self, name: str) -> Path:
        return self._get(name).chunks[0].path

    def _locate(self, t: _Tensor, c: _Chunk) -> _Located:
        """Where the chunk's values begin: its archive's zip directory and data.pkl, read
        once (a few hundred bytes)."""
        if c in self._located:
            return self._located[c]
        try:
            with open(c.path, "rb") as f:
                window = _Window(f, c.begin, c.length)
                with zipfile.ZipFile(window) as z:
                    names = z.namelist()
                    pkl = next((n for n in names if n.endswith("/data.pkl")), None)
                    if pkl is None:
                        raise InputError(c.path, f"chunk of '{t.name}' has no data.pkl")
                    prefix = pkl.removesuffix("data.pkl")
                    order = f"{prefix}byteorder"
                    if order in names and z.read(order).strip() != b"little":
                        raise InputError(c.path, f"chunk of '{t.name}' is big-endian")
                    stored = restricted_load(z.read(pkl), c.path, _CHUNK_GLOBALS)
                    if not isinstance(stored, _StoredTensor):
                        raise InputError(c.path, f"chunk of '{t.name}' is not one tensor")
                    member = z.getinfo(f"{prefix}data/{stored.key}")
                window.seek(member.header_offset)
                sig, n_name, n_extra = _ZIP_LOCAL_HEADER.unpack(window.read(30))
        except OSError as e:
            raise cannot_read(c.path, e) from None
        except (zipfile.BadZipFile, KeyError, struct.error) as e:
            raise InputError(
                c.path, f"chunk of '{t.name}' at byte {c.begin}: not a torch.save archive ({e})"
            ) from None
        self._check_chunk(t, c, stored, member, sig)
        data = member.header_offset + 30 + n_name + n_extra
        located = _Located(
            c.begin + data + stored.storage_offset * np.dtype(_ROW_DTYPES[t.dtype]).itemsize,
            math.prod(c.sizes[1:]),
        )
        self._located[c] = located
        return located

    def _check_chunk(self, t, c, stored, member, sig) -> None:  # noqa: ANN001
        """The archive holds the chunk's values uncompressed, row-major, in the tensor's dtype."""
        problem = None
        contiguous = tuple(math.prod(c.sizes[i + 1 :]) for i in range(len(c.sizes)))
        itemsize = np.dtype(_ROW_DTYPES[t.dtype]).itemsize
        if sig != b"PK\x03\x04" or member.compress_type != zipfile.ZIP_STORED:
            problem = "its values are not stored uncompressed"
        elif stored.dtype != t.dtype:
            problem = f"it holds {stored.dtype}, the metadata says {t.dtype}"
        elif stored.size != c.sizes:
            problem = f"it holds shape {list(stored.size)}, the metadata says {list(c.sizes)}"
        elif math.prod(c.sizes) > 1 and stored.stride != contiguous:
            problem = f"its values are not row-major (stride {list(stored.stride)})"
        elif (stored.storage_offset + math.prod(c.sizes)) * itemsize > member.file_size:
            problem = "its storage is shorter than the shape"
        if problem is not None:
            raise InputError(c.path, f"chunk of tensor '{t.name}' at byte {c.begin}: {problem}")

    def _matrix(self, name: str) -> tuple[_Tensor, np.dtype]:
        t = self._get(name)
        if len(t.shape) != 2:
            raise InputError(
                self.folder, f"tensor '{name}' has shape {list(t.shape)}, expected 2-D"
            )
        if t.dtype not in _ROW_DTYPES:
            raise InputError(
                self.folder,
                f"tensor '{name}' has dtype {t.dtype}, which geodiag cannot read from a DCP "
                f"folder (it reads {', '.join(_ROW_DTYPES)})",
            )
        return t, np.dtype(_ROW_DTYPES[t.dtype])

    def _read(self, name: str, rows: np.ndarray) -> tuple[_Tensor, np.ndarray]:
        """Stored values of ``rows`` (sorted, unique), ``(len(rows), d)`` in the stored dtype,
        from the chunks that hold them: one read per run of adjacent rows in each chunk."""
        t, dt = self._matrix(name)
        out = np.empty((len(rows), t.shape[1]), dtype=dt)
        filled = np.zeros(len(rows), dtype=np.int64)
        for c in t.chunks:
            (r0, c0), (nr, nc) = c.offsets, c.sizes
            lo, hi = np.searchsorted(rows, [r0, r0 + nr])
            if lo == hi or nc == 0:
                continue
            at = self._locate(t, c)
            local = rows[lo:hi] - r0
            breaks = np.flatnonzero(np.diff(local) > 1) + 1
            runs = np.split(np.arange(lo, hi), breaks)
            row_bytes = nc * dt.itemsize
            spans = [
                (at.data_begin + int(local[run[0] - lo]) * row_bytes, len(run) * row_bytes)
                for run in runs
            ]
            digest = self._digests.setdefault(c.path, hashlib.sha256())
            for run, data in zip(runs, LocalFile(c.path).read(spans), strict=True):
                digest.update(data)
                out[run, c0 : c0 + nc] = np.frombuffer(data, dtype=dt).reshape(len(run), nc)
            filled[lo:hi] += nc
        if np.any(filled != t.shape[1]):
            raise InputError(self.folder, f"tensor '{name}': its chunks do not tile the rows")
        return t, out

    def read_rows(self, name: str, rows: np.ndarray, float32: bool = False) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        n = self.shape(name)[0]
        if rows.size and (rows.min() < 0 or rows.max() >= n):
            bad = rows[(rows < 0) | (rows >= n)][:5].tolist()
            raise InputError(
                self.folder, f"row ids {bad} out of range for tensor '{name}' with {n} rows"
            )
        unique, back = np.unique(rows, return_inverse=True)
        t, raw = self._read(name, unique)
        return _decode(t.dtype, raw[back.reshape(-1)], float32)

    def read_block(self, name: str, start: int, stop: int, float32: bool = False) -> np.ndarray:
        stop = min(stop, self.shape(name)[0])
        t, raw = self._read(name, np.arange(start, max(stop, start), dtype=np.int64))
        return _decode(t.dtype, raw, float32)

    def digests(self) -> dict[str, str]:
        return {str(p): d.hexdigest() for p, d in self._digests.items()}


def _decode(dtype: str, raw: np.ndarray, float32: bool) -> np.ndarray:
    """Stored values as float64, or float32 when asked and exact (every dtype but F64)."""
    if dtype == "BF16":
        raw = bf16_to_float32(raw)
    exact32 = float32 and dtype != "F64"
    return np.asarray(raw, dtype=np.float32 if exact32 else np.float64)
