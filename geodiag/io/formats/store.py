"""Safetensors stores: one file, or the shards a ``model.safetensors.index.json`` names,
on disk or behind a URL (each file's header, then only the rows asked for, by byte
ranges), MLX's packed matrices dequantized (``geodiag.io.formats.mlx_quantized``); and
the two formats they are (:data:`SINGLE`, :data:`SHARDED`), registered in
``geodiag.io.formats.registry``, which picks the store for a path or a URL.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from geodiag.errors import InputError, cannot_read, nested_too_deeply
from geodiag.io.formats.format import Format, RemoteCheckpoint, SmallFiles, head, one_file
from geodiag.io.formats.mlx_quantized import dequantizing
from geodiag.io.formats.safetensors import FLOAT_DTYPES, SafetensorsFile
from geodiag.io.formats.tensor_store import digest_text
from geodiag.io.sources.remote import INDEX, WEIGHTS

CODEBOOKS = "codebooks.safetensors"  # beside the weights: the RQ-VAE's, not the model's


class SafetensorsStore:
    """One file, or shards listed by ``model.safetensors.index.json``; shards open lazily."""

    def __init__(
        self,
        weight_map: dict[str, Path],
        description: str,
        open_file: Callable[[Path], SafetensorsFile] = SafetensorsFile,
    ) -> None:
        """``open_file``: a file of ``weight_map`` opened (a URL's, by ranges: geodiag.io.sources.remote)."""
        self._weight_map = weight_map
        self._open: dict[Path, SafetensorsFile] = {}
        self._open_file = open_file
        self.description = description

    @classmethod
    def single(
        cls,
        path: Path | str,
        open_file: Callable[[Path | str], SafetensorsFile] = SafetensorsFile,
        description: str | None = None,
    ) -> SafetensorsStore:
        """The store of one file (``open_file``: a URL's, by ranges), its header read once."""
        f = open_file(path)
        store = cls(
            {name: f.path for name in f.keys()},
            description or f"safetensors file {Path(path).name}",
            open_file,
        )
        store._open[f.path] = f
        return store

    @classmethod
    def sharded(cls, index_path: Path) -> SafetensorsStore:
        shards = shard_names(index_path)
        files = {name: index_path.parent / shard for name, shard in shards.items()}
        for shard in sorted(set(files.values())):
            if not shard.is_file():
                raise InputError(index_path, f"names shard '{shard.name}', which is missing")
        return cls(files, sharded_description(shards, index_path.name))

    def _file(self, name: str) -> SafetensorsFile:
        path = self.file_of(name)
        if path not in self._open:
            self._open[path] = self._open_file(path)
        f = self._open[path]
        if name not in f.tensors:
            raise InputError(
                path, f"shard index says tensor '{name}' is here, but the file lacks it"
            )
        return f

    def names(self) -> list[str]:
        return list(self._weight_map)

    def file_of(self, name: str) -> Path:
        try:
            return self._weight_map[name]
        except KeyError:
            raise InputError(self.description, f"no tensor named '{name}'") from None

    def shape(self, name: str) -> tuple[int, ...]:
        return self._file(name).info(name).shape

    def dtype(self, name: str) -> str:
        return self._file(name).info(name).dtype

    def read_rows(self, name: str, rows: np.ndarray, float32: bool = False) -> np.ndarray:
        return self._file(name).read_rows(name, rows, float32)

    def read_block(self, name: str, start: int, stop: int, float32: bool = False) -> np.ndarray:
        return self._file(name).read_block(name, start, stop, float32)

    def read_words(self, name: str, rows: np.ndarray) -> np.ndarray:
        """A U32 tensor's rows as stored: the packed words ``geodiag.io.formats.mlx_quantized`` reads."""
        return self._file(name).read_words(name, rows)

    def digests(self) -> dict[str, str]:
        return {str(p): digest_text(f.digest) for p, f in self._open.items()}


def shard_names(index_path: Path) -> dict[str, str]:
    """Tensor name -> shard file name, from a ``model.safetensors.index.json``."""
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
        weight_map = index["weight_map"]
        if not isinstance(weight_map, dict):
            raise TypeError
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
        raise InputError(
            index_path, "not a valid shard index (needs a 'weight_map' object)"
        ) from None
    except RecursionError:
        raise nested_too_deeply(index_path) from None
    except OSError as e:
        raise cannot_read(index_path, e) from None
    return {name: str(shard) for name, shard in weight_map.items()}


def sharded_description(shards: dict[str, str], index_name: str) -> str:
    return f"sharded safetensors ({len(set(shards.values()))} shards, {index_name})"


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def find_sharded(path: Path) -> Path | None:
    """A folder's ``model.safetensors.index.json``."""
    return None if path.is_file() else one_file(path, (INDEX,))


def find_single(path: Path) -> Path | None:
    """A safetensors file (by its header: an 8-byte length, then a JSON object; or its
    ``.safetensors`` name), or a folder's ``model.safetensors``, else its one
    ``*.safetensors`` besides ``codebooks.safetensors``."""
    if path.is_file():
        return path if path.suffix == ".safetensors" or _safetensors_head(path) else None
    if (path / WEIGHTS).is_file():
        return path / WEIGHTS
    singles = [s for s in sorted(path.glob("*.safetensors")) if s.name != CODEBOOKS]
    return singles[0] if len(singles) == 1 else None


def _safetensors_head(path: Path) -> bool:
    """The file starts as safetensors does: a little-endian header length that fits the
    file, then ``{"``."""
    raw = head(path, 10)
    if len(raw) < 10 or raw[8:10] != b'{"':
        return False
    n = int.from_bytes(raw[:8], "little")
    try:
        return 2 <= n <= path.stat().st_size - 8
    except OSError:
        return False


def opened_by_ranges(remote) -> Callable[[str], SafetensorsFile]:
    """A URL folder's safetensors file opened by ranges, from the name as shown."""

    def open_file(where: str) -> SafetensorsFile:
        return SafetensorsFile(where, remote.file(where.rsplit("/", 1)[1]))

    return open_file


def url_sharded(remote, name: str | None, small: SmallFiles) -> RemoteCheckpoint | None:
    """A URL folder whose small files hold the shard index: each shard by ranges."""
    if name is not None:
        return None
    folder = small.folder()
    if not (folder / INDEX).is_file():
        return None
    shards = shard_names(folder / INDEX)
    files = {n: remote.shown(shard) for n, shard in shards.items()}
    store = SafetensorsStore(files, sharded_description(shards, INDEX), opened_by_ranges(remote))
    return RemoteCheckpoint(folder, dequantizing(store, folder), remote.where, [folder])


def url_single(remote, name: str | None, small: SmallFiles) -> RemoteCheckpoint | None:
    """The safetensors file a URL names, or a URL folder's ``model.safetensors``."""
    if name is not None and not name.endswith(".safetensors"):
        return None
    folder = small.folder()
    if name is None and not remote.exists(WEIGHTS):  # a refusal too: S3 may hide 404s
        return None
    if name == WEIGHTS and not remote.exists(WEIGHTS, required=True):
        return None
    name = name or WEIGHTS
    store = SafetensorsStore.single(
        remote.shown(name), opened_by_ranges(remote), f"safetensors file {name}"
    )
    return RemoteCheckpoint(folder, dequantizing(store, folder), remote.where, [folder])


SHARDED = Format(
    name="sharded safetensors",
    what="safetensors shards and their `model.safetensors.index.json`, each read by byte ranges",
    find=find_sharded,
    open=lambda found, asked: dequantizing(SafetensorsStore.sharded(found), asked),
    url=url_sharded,
    files=(r"model-\d+-of-\d+\.safetensors", r"model\.safetensors\.index\.json"),
)
SINGLE = Format(
    name="safetensors",
    what="one safetensors file (`model.safetensors`, or a folder's one `*.safetensors`), "
    "MLX's packed matrices dequantized",
    find=find_single,
    open=lambda found, asked: dequantizing(SafetensorsStore.single(found), asked),
    url=url_single,
    files=(r"model\.safetensors",),
    url_suffixes=(".safetensors",),
)
