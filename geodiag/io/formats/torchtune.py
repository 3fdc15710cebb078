"""torchtune's output folder, ``epoch_N/`` (``FullModelHFCheckpointer`` with
``safe_serialization: False``): the state dict split into ``model-00001-of-0000K.bin``
shards, each a ``torch.save`` dict of tensors named Hugging Face's way, beside the base's
``config.json`` and tokenizer files copied over (releases since 0.5 also write a
``pytorch_model.bin.index.json``, earlier ones none). Each shard is read as a torch pickle
is (:class:`~geodiag.io.formats.torch_pickle.TorchStore`, whole); a missing shard is named.
With ``safe_serialization: True`` its shards are safetensors, read as such.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from geodiag.errors import InputError
from geodiag.io.formats.format import Format, on_disk_only
from geodiag.io.formats.torch_pickle import TorchStore
from geodiag.io.sources.layouts import check_not_lfs_pointer

SHARD = re.compile(r"model-(\d{5})-of-(\d{5})\.bin")  # torchtune's SHARD_FNAME, as .bin
FIRST = "model-00001-of-00001.bin"  # the one a URL is asked for (a URL cannot be listed)


def _shards(path: Path) -> dict[Path, tuple[int, int]]:
    if path.is_file():
        return {}
    return {
        p: (int(m.group(1)), int(m.group(2)))
        for p in sorted(path.glob("model-*-of-*.bin"))
        if (m := SHARD.fullmatch(p.name))
    }


def find(path: Path) -> Path | None:
    """A folder holding ``model-NNNNN-of-NNNNN.bin`` shards: the folder."""
    return path if _shards(path) else None


class TorchShardsStore:
    """The tensors of several ``.bin`` shards, each a torch state dict loaded whole."""

    def __init__(self, folder: Path) -> None:
        shards = _shards(folder)
        totals = sorted({total for _, total in shards.values()})
        if len(totals) != 1:
            raise InputError(folder, f"torchtune shards of {len(totals)} sets (of {totals})")
        n = totals[0]
        have = {i for i, _ in shards.values()}
        if missing := [i for i in range(1, n + 1) if i not in have]:
            name = f"model-{missing[0]:05d}-of-{n:05d}.bin"
            raise InputError(folder, f"torchtune's shard {name} is missing ({len(have)} of {n})")
        self._stores: dict[str, TorchStore] = {}
        for path in shards:
            check_not_lfs_pointer(path)
            store = TorchStore(path)
            for name in store.names():
                if name in self._stores:
                    raise InputError(path, f"tensor '{name}' is in two shards")
                self._stores[name] = store
        self._shards = {store.path: store for store in self._stores.values()}
        self.description = f"torchtune .bin shards ({n}, {folder.name}/)"

    def _store(self, name: str) -> TorchStore:
        try:
            return self._stores[name]
        except KeyError:
            raise InputError(self.description, f"no tensor named '{name}'") from None

    def names(self) -> list[str]:
        return list(self._stores)

    def file_of(self, name: str) -> Path:
        return self._store(name).path

    def shape(self, name: str) -> tuple[int, ...]:
        return self._store(name).shape(name)

    def dtype(self, name: str) -> str:
        return self._store(name).dtype(name)

    def read_rows(self, name: str, rows: np.ndarray, float32: bool = False) -> np.ndarray:
        return self._store(name).read_rows(name, rows, float32)

    def read_block(self, name: str, start: int, stop: int, float32: bool = False) -> np.ndarray:
        return self._store(name).read_block(name, start, stop, float32)

    def digests(self) -> dict[str, str]:
        return {k: v for store in self._shards.values() for k, v in store.digests().items()}


REMOTE = "torchtune's .bin shards are pickles, read from a local folder only: download it"


FORMAT = Format(
    name="torchtune .bin shards",
    what="torchtune's `epoch_N/`: `model-00001-of-0000K.bin` shards (HF names), through "
    "torch's `weights_only=True`",
    find=find,
    open=lambda found, asked: TorchShardsStore(found),
    url=on_disk_only(FIRST, REMOTE),  # a URL folder with the first of one shard: named
    remote=REMOTE,
    files=(r"model-\d{5}-of-\d{5}\.bin",),
)
