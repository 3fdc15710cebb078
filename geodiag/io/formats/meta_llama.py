"""Meta's own Llama checkpoint layout (``llama download``, the ``original/`` folder of the
Hub's Llama repositories): ``params.json`` (``dim``, ``n_layers``, ``vocab_size``) beside
``consolidated.00.pth``, a ``torch.save`` state dict named Meta's way
(``tok_embeddings.weight``, ``layers.N.attention.wq.weight``, ``output.weight``), read as a
torch pickle is (:class:`~geodiag.io.formats.torch_pickle.TorchStore`); its input
embedding is found by ``tok_embeddings`` (``geodiag.io.formats.tensor_names``). A
model-parallel set (``consolidated.01.pth`` too: each rank holds a slice of every
matrix) is recognised and not read.
"""

from __future__ import annotations

from pathlib import Path

from geodiag.io.formats.format import Format, on_disk_only
from geodiag.io.formats.torch_pickle import TorchStore
from geodiag.io.sources.layouts import check_not_lfs_pointer

PARAMS = "params.json"


def _shards(path: Path) -> list[Path]:
    if path.is_file() or not (path / PARAMS).is_file():
        return []
    return sorted(path.glob("consolidated.*.pth"))


def find(path: Path) -> Path | None:
    """A folder with ``params.json`` and one ``consolidated.00.pth``: that file."""
    shards = _shards(path)
    return shards[0] if len(shards) == 1 else None


def find_sharded(path: Path) -> Path | None:
    """A folder with ``params.json`` and several ``consolidated.NN.pth``: the folder."""
    return path if len(_shards(path)) > 1 else None


def _open(found: Path, asked: Path) -> TorchStore:
    check_not_lfs_pointer(found)
    return TorchStore(found)


REMOTE = "Meta's consolidated.*.pth is a pickle, read from a local folder only: download it"


url = on_disk_only(PARAMS, REMOTE)  # a URL folder with ``params.json``: named, not read


FORMAT = Format(
    name="Meta Llama",
    what="Meta's layout: `params.json` beside `consolidated.00.pth` (`tok_embeddings.weight`), "
    "through torch's `weights_only=True`",
    find=find,
    open=_open,
    url=url,
    remote=REMOTE,
    files=(r"consolidated\.\d+\.pth", r"params\.json"),
)
SHARDED = Format(
    name="Meta Llama, model-parallel",
    what="Meta's layout split over ranks (`consolidated.00.pth`, `consolidated.01.pth`, ...)",
    find=find_sharded,
    way_out=lambda found: (
        "Meta's model-parallel checkpoint (each consolidated.NN.pth holds a slice of every "
        "matrix), not read: convert it with transformers' convert_llama_weights_to_hf.py "
        "and check that folder"
    ),
    remote=REMOTE,
)
