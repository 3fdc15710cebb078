"""TensorBoard Embedding Projector export of a checkpoint's new-token rows.

Writes, in one folder: ``vectors.tsv`` (one row per new token, tab-separated floats),
``metadata.tsv`` (header ``token<TAB>level<TAB>code``, one row per token, same order)
and ``projector_config.pbtxt``. Load with ``tensorboard --logdir DIR`` (Projector tab)
or upload the two TSVs to projector.tensorflow.org. An untied output head gets its own
``vectors_output.tsv`` / ``metadata_output.tsv`` and a second ``embeddings`` entry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from geodiag.analysis.rows import new_rows
from geodiag.atomic import atomic_write_many
from geodiag.escape import tsv_field
from geodiag.io.checkpoint import open_checkpoint
from geodiag.io.sources.options import ReadOptions

CONFIG_FILENAME = "projector_config.pbtxt"


def _pbtxt_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def export_projector(
    path: str | Path, out_dir: str | Path, read: ReadOptions | None = None
) -> list[Path]:
    """Write the projector files for ``path`` into ``out_dir``; returns the files written."""
    # The vectors alone: no movement to measure, so no reference to open.
    read = dataclasses.replace(read or ReadOptions(), reference=None, auto_reference=False)
    out_dir = Path(out_dir)
    ckpt = open_checkpoint(path, read)
    new = ckpt.new
    files: dict[Path, str | Iterator[str]] = {}
    config = []
    for m in ckpt.matrices:
        rows, keep = new_rows(ckpt, m)  # (n_kept, d) float64
        suffix = "" if m.role == "input" else f"_{m.role}"
        vectors, metadata = f"vectors{suffix}.tsv", f"metadata{suffix}.tsv"
        # %.9g round-trips float32, the widest dtype embeddings are usually stored in.
        files[out_dir / vectors] = ("\t".join(f"{v:.9g}" for v in row) + "\n" for row in rows)
        lines = ["token\tlevel\tcode\n"]
        for i in np.flatnonzero(keep):
            level = new.level_names[new.level_index[i]] if new.level_index is not None else ""
            code = str(int(new.codes[i])) if new.codes is not None else ""
            lines.append(f"{tsv_field(new.tokens[i])}\t{tsv_field(level)}\t{code}\n")
        files[out_dir / metadata] = "".join(lines)
        config.append(
            "embeddings {\n"
            f"  tensor_name: {_pbtxt_string(f'{m.tensor} (new tokens)')}\n"
            f"  tensor_path: {_pbtxt_string(vectors)}\n"
            f"  metadata_path: {_pbtxt_string(metadata)}\n"
            "}\n"
        )
    files[out_dir / CONFIG_FILENAME] = "".join(config)
    atomic_write_many(files)
    return list(files)
