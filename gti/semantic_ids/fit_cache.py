"""On-disk cache of RQ-VAE fits, keyed by the exact embeddings and config.

Training is deterministic under its seed, so a fit is a pure function of
(embeddings, config): re-running ``gti sids build`` with the same inputs can read
the codes and codebooks back instead of spending ~40 s of CPU re-deriving them.
The cache stores what the SIDs need (codes, codebooks, last-level residuals,
training history), not the encoder/decoder weights.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict
from pathlib import Path

import numpy as np

from geodiag.atomic import atomic_path
from gti.cache import cache_root
from gti.semantic_ids.config import RQVAEConfig
from gti.semantic_ids.rqvae import RQVAEResult, train_rqvae

VERSION = "rqvae-fit-v1"  # bump when training changes, so stale fits are not reused

log = logging.getLogger(__name__)


def fit_key(embeddings: np.ndarray, cfg: RQVAEConfig) -> str:
    h = hashlib.sha256(VERSION.encode())
    h.update(json.dumps(asdict(cfg), sort_keys=True).encode())
    h.update(
        str(embeddings.shape).encode()
        + np.ascontiguousarray(embeddings, dtype=np.float32).tobytes()
    )
    return h.hexdigest()[:32]


def _path(key: str, cache_dir: str | Path | None) -> Path:
    return cache_root(cache_dir) / "rqvae" / f"{key}.safetensors"


def load_fit(path: Path) -> RQVAEResult | None:
    from safetensors import safe_open
    from safetensors.numpy import load_file

    if not path.is_file():
        return None
    try:
        data = load_file(path)
        with safe_open(path, "np") as f:
            history = json.loads(f.metadata()["history"])
    except Exception as e:  # torn or foreign file: retrain rather than fail
        log.warning("ignoring unreadable RQ-VAE cache %s (%s)", path, e)
        return None
    n_levels = sum(k.startswith("codebook_") for k in data)
    return RQVAEResult(
        codes=data["codes"],
        last_residuals=data["last_residuals"],
        codebooks=[data[f"codebook_{i}"] for i in range(n_levels)],
        history=history,
    )


def save_fit(path: Path, fit: RQVAEResult) -> None:
    from safetensors.numpy import save_file

    tensors = {"codes": fit.codes, "last_residuals": fit.last_residuals}
    tensors |= {f"codebook_{i}": b for i, b in enumerate(fit.codebooks)}
    with atomic_path(path) as tmp:
        save_file(tensors, tmp, metadata={"history": json.dumps(fit.history), "version": VERSION})


def train_or_load(
    embeddings: np.ndarray,
    cfg: RQVAEConfig,
    *,
    cache_dir: str | Path | None = None,
    progress: bool = True,
) -> tuple[RQVAEResult, bool]:
    """The fit for (embeddings, cfg), and whether it came from the cache."""
    path = _path(fit_key(embeddings, cfg), cache_dir)
    cached = load_fit(path)
    if cached is not None:
        return cached, True
    fit = train_rqvae(embeddings, cfg, progress=progress)
    save_fit(path, fit)
    return fit, False
