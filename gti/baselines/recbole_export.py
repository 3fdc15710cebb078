"""The split as RecBole benchmark files, so RecBole's SASRec trains and is ranked on
exactly the LM arms' examples (``scripts/sasrec_recbole.py``).

``<folder>/<name>.{train,valid,test}.inter``, tab-separated with RecBole's typed
header ``user_id:token  item_id_list:token_seq  item_id:token``: one row per
leave-one-out example (history of at most ``max_history`` items, oldest first,
space-separated; then the target).
"""

from __future__ import annotations

from pathlib import Path

from geodiag.atomic import atomic_write
from gti.data.sequences import Splits

HEADER = "user_id:token\titem_id_list:token_seq\titem_id:token\n"


def write_benchmark_files(splits: Splits, folder: Path, name: str) -> list[Path]:
    folder = Path(folder)
    paths = []
    for split in ("train", "valid", "test"):
        rows = []
        for e in getattr(splits, split):
            if any(" " in i or "\t" in i for i in (*e.history, e.target)):
                raise ValueError(f"item id with whitespace in user {e.user_id!r}: not exportable")
            rows.append(f"{e.user_id}\t{' '.join(e.history)}\t{e.target}\n")
        path = folder / f"{name}.{split}.inter"
        atomic_write(path, HEADER + "".join(rows))
        paths.append(path)
    return paths
