"""What an offline machine (the GPU box) needs before ``gti study run`` can start:
MovieLens-100k and SmolLM2-135M, each either unpacked in the gti cache or as its
installed PyPI distribution (``gti.wheels`` reads files from installed wheels)."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from gti.data import movielens
from gti.models import smollm2


def _installed(requirement: str) -> bool:
    name, version = requirement.split("==")
    try:
        return importlib.metadata.version(name) == version
    except importlib.metadata.PackageNotFoundError:
        return False


def offline_inputs_missing(cache_dir: str | Path | None = None) -> list[str]:
    """One line per missing input, naming where it was looked for; empty when ready."""
    missing = []
    data = movielens.dataset_dir(cache_dir)
    if not (data / movielens.INTER_FILE).is_file() and not _installed(movielens.REQUIREMENT):
        missing.append(f"MovieLens-100k: neither {data} nor an installed {movielens.REQUIREMENT}")
    model = smollm2.model_dir(cache_dir)
    if not (model / smollm2.MARKER).is_file() and not _installed(smollm2.REQUIREMENT):
        missing.append(f"SmolLM2-135M: neither {model} nor an installed {smollm2.REQUIREMENT}")
    return missing
