"""The SID maps and codebooks of the generative-recommendation frameworks, read as they
write them: one module per dialect, each registering itself with one line below
(``base.register_map`` / ``base.register_codebooks``), recognised by content
(:func:`read_sid_map`, :func:`read_codebooks`), found beside a checkpoint under the
frameworks' usual names (:func:`find_beside`).

Maps: LC-Rec / LETTER / MiniOneRec ``*.index.json`` (``index_json``), ETEGRec's
``*.code.json`` (``code_json``), GRID's ``merged_predictions_tensor.pt`` (``grid_tensor``),
MiniOneRec's ``*.codes*.npy`` (``codes_npy``), OpenOneRec's ``*_codes.parquet``
(``openonerec_parquet``), semantic-ids-llm's table (``semantic_ids_llm_parquet``),
TorchEasyRec's ``item_id`` / ``codes`` table, parquet or CSV (``torcheasyrec_table``).
Codebooks: LC-Rec's ``.pth`` (``lcrec_pth``), MiniOneRec's ``.npz`` (``minionerec_npz``),
OpenOneRec's ``model.pt`` (``openonerec_pt``), GRID's ``.ckpt`` (``grid_ckpt``),
RQ-VAE-Recommender's ``.pt`` (``rqvae_recommender_pt``), semantic-ids-llm's
(``semantic_ids_llm_pt``), and safetensors: ours, or a framework's inside its whole model's
(``safetensors_books``). torch files go through ``torch_books`` (restricted unpickling).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from geodiag.io.vocabulary.sids import (  # noqa: F401  (each registers its dialect)
    code_json,
    codes_npy,
    grid_ckpt,
    grid_tensor,
    index_json,
    lcrec_pth,
    minionerec_npz,
    openonerec_parquet,
    openonerec_pt,
    rqvae_recommender_pt,
    safetensors_books,
    semantic_ids_llm_parquet,
    semantic_ids_llm_pt,
    torcheasyrec_table,
)
from geodiag.io.vocabulary.sids.base import (
    CODEBOOKS,
    MAPS,
    Dialect,
    SidCodebooks,
    SidMap,
    Spelling,
    recognise,
)


def read_sid_map(path: str | Path) -> SidMap:
    """The item -> code map in ``path``, whichever framework wrote it (by content)."""
    path = Path(path)
    return recognise(path, MAPS, "SID map").read(path)


def stream_sid_map(path: str | Path) -> Iterator[tuple[list[str], np.ndarray]]:
    """(item ids, codes as written) a block of items at a time, for a format that streams
    (``*.index.json``, the parquet tables; memory flat in the item count); else the whole
    map as one block."""
    path = Path(path)
    dialect = recognise(path, MAPS, "SID map")
    if dialect.stream is not None:
        yield from dialect.stream(path)
        return
    m = dialect.read(path)
    yield m.items, m.codes


def read_codebooks(path: str | Path) -> SidCodebooks:
    """The per-level codebooks in ``path``, whichever framework wrote them (by content)."""
    path = Path(path)
    return recognise(path, CODEBOOKS, "codebook file").read(path)


# Files beside the weights that match a SID map's usual name but are the checkpoint's own.
WEIGHT_INDEXES = (".safetensors.index.json", ".bin.index.json", ".pt.index.json")


def find_beside(folders: list[Path], registry: dict[str, Dialect]) -> Path | None:
    """The first file in ``folders`` named as one of ``registry``'s dialects names its
    files, that the dialect recognises by content; None when none is."""
    for folder in folders:
        for dialect in registry.values():
            for pattern in dialect.usual_names:
                for path in sorted(folder.glob(pattern)):
                    if path.name.endswith(WEIGHT_INDEXES):
                        continue  # a sharded checkpoint's own index, not a SID map
                    if path.is_file() and _recognised(path, dialect, exact="*" not in pattern):
                        return path
    return None


def _recognised(path: Path, dialect: Dialect, exact: bool) -> bool:
    """Whether ``dialect`` reads ``path``. A file that cannot be read (a pickle refused) is
    taken when it bears the dialect's own name, so reading it says why (a planted
    payload named as LC-Rec names its checkpoint); under a wildcard it is passed over (a
    Trainer's ``rng_state.pth`` beside the weights)."""
    from geodiag.errors import InputError
    from geodiag.io.vocabulary.sids.base import head_of

    try:
        return dialect.sniff(path, head_of(path))
    except InputError:
        return exact


__all__ = [
    "CODEBOOKS",
    "MAPS",
    "SidCodebooks",
    "SidMap",
    "Spelling",
    "find_beside",
    "read_codebooks",
    "read_sid_map",
    "stream_sid_map",
]
