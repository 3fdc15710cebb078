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
  ``geodiag.io.formats.torch_zip``'s restricted unpickler, which knows exactly the globals DCP
  writes (:data:`_METADATA_GLOBALS`) and builds inert records for them; any other global
  is refused.
- each chunk, at (offset, length) of its ``.distcp`` file: a ``torch.save`` archive, an
  uncompressed zip holding ``archive/data.pkl`` (``_rebuild_tensor_v2`` of a typed storage:
  the storage offset, size and stride) and ``archive/data/<key>``, the raw little-endian
  values. The zip's directory and ``data.pkl`` (restricted the same way, to a plain
  tensor's globals: ``geodiag.io.formats.torch_zip``) are read once per chunk; then only the byte
  ranges of the rows asked for, so a row-sharded embedding (FSDP2: chunk r holds rows
  r*n/w ..) costs the rows' bytes in the one or few chunks that hold them.

Where the files are: a :class:`~geodiag.io.sources.byte_ranges.Folder`, asked for each file by the
name ``.metadata`` gives it, never listed: on disk, or behind a URL (``geodiag.io.sources.remote``:
https, hf, s3, gs), through the same parser and the same restricted unpickler. A chunk's
archive costs its first and last ``torch_zip.ARCHIVE_EDGE`` bytes (where ``zipfile`` looks:
the directory at the end, ``data.pkl`` and the data's local header at the start), fetched
together, which over a URL is one request for a chunk of up to ``COALESCE_GAP``.

Names: a nested state dict (``{"model": ..., "optim": ...}``, accelerate's ``{"model":
...}``) exposes the tensors under ``model`` by their names in it; optimizer state
(``exp_avg``, ``step``) is never exposed, so it cannot be taken for the embedding, and a
folder of optimizer state alone (accelerate's ``optimizer_0/``) is an error that names the
model's folder beside it.
"""

from __future__ import annotations

import math
import pickle
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np

from geodiag.errors import InputError
from geodiag.io.formats.format import Format, RemoteCheckpoint, SmallFiles
from geodiag.io.formats.tensor_store import digest_text, new_digest
from geodiag.io.formats.torch_zip import (
    ROW_DTYPES,
    TENSOR_GLOBALS,
    ReadsRows,
    Record,
    StoredTensor,
    open_archive,
    record,
    restricted_load,
    torch_size,
)
from geodiag.io.sources.byte_ranges import ByteSource, Folder, LocalFolder, read_rows
from geodiag.io.sources.layouts import FSDP_FIRST_SUBFOLDER, FSDP_SUBFOLDERS, dcp_folder
from geodiag.io.sources.remote import SMALL_FILES, WEIGHTS, fetch_small_files

METADATA = ".metadata"
WRITER = "torch.distributed.checkpoint"  # whose classes a pickle may name
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
# The top-level keys of a nested state dict that hold an optimizer's state, not the model's.
_OPTIMIZER_KEYS = ("optim", "optimizer", "optimizers")


def _same(value: object) -> object:
    """``_get_layout('torch.strided')``, ``_MEM_FORMAT_ENCODING(0)``: the value itself."""
    return value


_DCP = "torch.distributed.checkpoint.metadata"
_METADATA_GLOBALS: dict[tuple[str, str], object] = {
    (_DCP, "Metadata"): record("Metadata"),
    (_DCP, "TensorStorageMetadata"): record("TensorStorageMetadata"),
    (_DCP, "BytesStorageMetadata"): record("BytesStorageMetadata"),
    (_DCP, "ChunkStorageMetadata"): record("ChunkStorageMetadata"),
    (_DCP, "TensorProperties"): record(
        "TensorProperties", ("dtype", "layout", "requires_grad", "memory_format", "pin_memory")
    ),
    (_DCP, "MetadataIndex"): record("MetadataIndex"),
    (_DCP, "StorageMeta"): record("StorageMeta"),
    (_DCP, "_MEM_FORMAT_ENCODING"): _same,
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"): record("_StorageInfo"),
    ("torch.serialization", "_get_layout"): _same,
    ("torch", "Size"): torch_size,
    # StorageMeta.checkpoint_id when dcp.save was given a Path (pathlib._local from 3.13)
    ("pathlib", "PosixPath"): PurePosixPath,
    ("pathlib._local", "PosixPath"): PurePosixPath,
    **{("torch", name): dtype for name, dtype in _TORCH_DTYPES.items()},
}


@dataclass(frozen=True)
class _Chunk:
    """One saved shard of a tensor: where it sits in the tensor and in which file."""

    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    name: str  # its .distcp file, as .metadata names it (relative_path)
    begin: int  # byte offset of its torch.save archive in that file
    length: int


@dataclass(frozen=True)
class _Tensor:
    name: str  # the flat name in the checkpoint
    dtype: str
    shape: tuple[int, ...]
    chunks: tuple[_Chunk, ...]


@dataclass(frozen=True)
class _Located:
    """A chunk's values: their byte offset in the ``.distcp`` file and their layout."""

    data_begin: int  # absolute offset of element (0, 0, ...) of the chunk
    row_elements: int  # elements per row of the chunk (the product of sizes[1:])


def _parse_metadata(folder: Folder) -> tuple[dict[str, _Tensor], bytes]:
    path = folder.shown(METADATA)
    raw = folder.fetch(METADATA)
    meta = restricted_load(raw, path, _METADATA_GLOBALS, WRITER)
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
        tensors[flat] = _tensor(path, flat, entry, where)
    model = _model_names(tensors, planner)
    if tensors and not model:
        keys = sorted({str(planner.get(flat, (flat,))[0]) for flat in tensors})
        raise InputError(
            folder.where,
            f"holds only optimizer state ({len(tensors)} tensors under "
            f"{', '.join(repr(k) for k in keys)}), not a model's weights: pass the model's "
            "folder (accelerate and the Trainer save it beside, as pytorch_model_fsdp_0/) "
            "or the checkpoint folder above both",
        )
    return model, raw


def _tensor(path: str, flat: str, entry: Record, where: dict) -> _Tensor:
    try:
        dtype = entry.properties.dtype
        shape = torch_size(entry.size)
        chunks = []
        for c in entry.chunks:
            offsets, sizes = torch_size(c.offsets), torch_size(c.sizes)
            info = where[(flat, offsets)]
            if getattr(info, "transform_descriptors", None):
                raise InputError(
                    path,
                    f"tensor '{flat}' is stored transformed ({info.transform_descriptors}: "
                    "compressed by a storage extension), which geodiag does not read: save "
                    "without the extension, or consolidate with dcp_to_torch_save",
                )
            file = str(info.relative_path)
            if PurePosixPath(file).name != file or file in ("", ".", ".."):
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


class DCPStore(ReadsRows):
    """The tensors of a DCP folder (on disk, or a :class:`~geodiag.io.sources.byte_ranges.Folder`
    behind a URL); chunks are located lazily, rows read by byte range.

    ``digests``: the digest (``new_digest``) of ``.metadata`` and, per ``.distcp`` file, of every byte range
    read from it, in read order.
    """

    def __init__(self, folder: Path | Folder) -> None:
        self._files = LocalFolder(folder) if isinstance(folder, Path) else folder
        self.folder = folder if isinstance(folder, Path) else folder.where
        self._entries, raw = _parse_metadata(self._files)
        self._digests = {self._files.shown(METADATA): new_digest(raw)}
        self._located: dict[_Chunk, _Located] = {}
        self._sources: dict[str, ByteSource] = {}
        files = sorted({c.name for t in self._entries.values() for c in t.chunks})
        for f in files:
            if not self._files.exists(f):
                raise InputError(self._files.shown(METADATA), f"names '{f}', which is missing")
        shards = f"{len(files)} .distcp file{'s' if len(files) != 1 else ''}"
        self.description = f"torch.distributed.checkpoint folder ({shards})"

    def file_of(self, name: str) -> Path | str:
        """The file of the tensor's first chunk: a path on disk, the URL as shown remotely."""
        shown = self._files.shown(self._entry(name).chunks[0].name)
        return Path(shown) if isinstance(self.folder, Path) else shown

    def _source(self, c: _Chunk) -> ByteSource:
        if c.name not in self._sources:
            self._sources[c.name] = self._files.file(c.name)
        return self._sources[c.name]

    def _locate(self, t: _Tensor, c: _Chunk) -> _Located:
        """Where the chunk's values begin: its archive's zip directory and data.pkl, read
        once (a few hundred bytes)."""
        if c in self._located:
            return self._located[c]
        archive = open_archive(self._source(c), TENSOR_GLOBALS, WRITER, c.begin, c.length)
        stored = archive.obj
        what = f"chunk of tensor '{t.name}' at byte {c.begin}"
        if not isinstance(stored, StoredTensor):
            raise InputError(archive.where, f"{what}: not one tensor")
        if stored.dtype != t.dtype:
            raise InputError(
                archive.where, f"{what}: it holds {stored.dtype}, the metadata says {t.dtype}"
            )
        if stored.size != c.sizes:
            raise InputError(
                archive.where,
                f"{what}: it holds shape {list(stored.size)}, the metadata says {list(c.sizes)}",
            )
        located = _Located(archive.data_begin(stored, what), math.prod(c.sizes[1:]))
        self._located[c] = located
        return located

    def _matrix(self, name: str) -> tuple[_Tensor, np.dtype]:
        t = self._entry(name)
        if len(t.shape) != 2:
            raise InputError(
                self.folder, f"tensor '{name}' has shape {list(t.shape)}, expected 2-D"
            )
        if t.dtype not in ROW_DTYPES:
            raise InputError(
                self.folder,
                f"tensor '{name}' has dtype {t.dtype}, which geodiag cannot read from a DCP "
                f"folder (it reads {', '.join(ROW_DTYPES)})",
            )
        return t, np.dtype(ROW_DTYPES[t.dtype])

    def _read(self, name: str, rows: np.ndarray) -> tuple[_Tensor, np.ndarray]:
        """Stored values of ``rows`` (sorted, unique), ``(len(rows), d)`` in the stored dtype,
        from the chunks that hold them: one read per run of adjacent rows in each chunk
        (``byte_ranges.read_rows``, as the safetensors and GGUF readers)."""
        t, dt = self._matrix(name)
        out = np.empty((len(rows), t.shape[1]), dtype=dt)
        filled = np.zeros(len(rows), dtype=np.int64)
        for c in t.chunks:
            (r0, c0), (nr, nc) = c.offsets, c.sizes
            lo, hi = np.searchsorted(rows, [r0, r0 + nr])
            if lo == hi or nc == 0:
                continue
            at = self._locate(t, c)
            raw = read_rows(self._source(c), at.data_begin, nc * dt.itemsize, rows[lo:hi] - r0)
            # rows are sorted and unique: raw is the runs' bytes in read order
            self._digests.setdefault(self._files.shown(c.name), new_digest()).update(raw)
            out[lo:hi, c0 : c0 + nc] = raw.view(dt)
            filled[lo:hi] += nc
        if np.any(filled != t.shape[1]):
            raise InputError(self.folder, f"tensor '{name}': its chunks do not tile the rows")
        return t, out

    def digests(self) -> dict[str, str]:
        return {where: digest_text(d) for where, d in self._digests.items()}


def dcp_weights(p: Path) -> Path | None:
    """The DCP folder holding ``p``'s weights: ``p`` itself, or the one FSDP subfolder
    (``pytorch_model_fsdp_0/``, as the Trainer and accelerate's ``save_state`` write with
    a sharded state dict) of a checkpoint folder; None when there is neither."""
    if dcp_folder(p):
        return p
    fsdp = sorted(d for d in p.glob(FSDP_SUBFOLDERS) if d.is_dir() and dcp_folder(d))
    if len(fsdp) > 1:
        raise InputError(
            p,
            f"several FSDP sharded models ({', '.join(d.name for d in fsdp)}): pass the "
            "folder of the one to read",
        )
    return fsdp[0] if fsdp else None


def url(remote, name: str | None, small: SmallFiles) -> RemoteCheckpoint | None:
    """A URL folder that is a DCP folder, or whose first FSDP subfolder is (the local
    :func:`dcp_weights`, probed since a URL cannot be listed), read by the local reader
    through ``remote``; None otherwise."""
    if name is not None:
        return None
    folder = small.folder()
    dcp = remote if remote.exists(METADATA) else remote.child(FSDP_FIRST_SUBFOLDER)
    if dcp is not remote and not dcp.exists(METADATA):
        remote.exists(WEIGHTS, required=True)  # S3 without ListBucket: the refusal named
        return None
    roots = [folder]
    if dcp is remote and PurePosixPath(remote.where).match(FSDP_SUBFOLDERS):
        # config and tokenizer sit above, where the local reader looks beside its parent
        roots.append(fetch_small_files(remote.parent(), SMALL_FILES))
    return RemoteCheckpoint(folder, DCPStore(dcp), remote.where, roots)


FORMAT = Format(
    name="torch.distributed.checkpoint",
    what="a DCP folder (`.metadata` beside `*.distcp` shards; FSDP2's `dcp.save`, a Trainer's "
    "`pytorch_model_fsdp_0/`), unpickled with DCP's classes only, rows by byte ranges",
    find=lambda path: None if path.is_file() else dcp_weights(path),
    open=lambda found, asked: DCPStore(found),
    url=url,
    files=(r"\.metadata", r"[^/]*\.distcp"),
)
