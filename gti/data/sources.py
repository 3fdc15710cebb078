"""``--data`` specs: the one place a dataset name becomes a loaded Dataset.

- ``movielens-100k``: RecBole's copy, fetched into the cache on first use.
- ``synthetic``: planted-hierarchy catalog (offline; tests).
- ``jsonl:CATALOG.jsonl,INTERACTIONS.csv``: your own files (``.tsv`` for tabs).
"""

from __future__ import annotations

from pathlib import Path

from geodiag.errors import InputError
from gti.data import movielens, synthetic, user_files
from gti.data.catalog import Dataset

DATA_HELP = (
    "movielens-100k | synthetic | jsonl:CATALOG.jsonl,INTERACTIONS.csv "
    "(JSONL lines need item_id plus text fields; interactions need a user_id,item_id,timestamp header)"
)


def load_dataset(spec: str, cache_dir: str | Path | None = None) -> Dataset:
    if spec == movielens.NAME:
        return movielens.load(cache_dir)
    if spec == synthetic.NAME:
        return synthetic.make_synthetic()
    if spec.startswith("jsonl:"):
        paths = [p.strip() for p in spec[len("jsonl:") :].split(",")]
        if len(paths) != 2 or not all(paths):
            raise InputError(
                "--data", f"expected jsonl:CATALOG.jsonl,INTERACTIONS.csv, got {spec!r}"
            )
        return user_files.load(paths[0], paths[1])
    raise InputError("--data", f"unknown dataset {spec!r}; expected {DATA_HELP}")
