"""``gti sids build``: catalog -> content embeddings -> RQ-VAE -> unique SIDs on disk.

Writes exactly three files into the output folder, all at once (staging folder
+ rename, so a failed run leaves nothing half-written):

- ``semantic_ids.json``: the geodiag sidecar (levels ``a, b, c`` and ``d`` for the
  dedup level; ``token_ids`` empty until the vocabulary is extended; the
  item -> codes map; ``base_vocab_size`` = the backbone's embedding rows).
- ``codebooks.safetensors``: one float32 ``[codes, code_dim]`` tensor per learned
  level, named by level. The dedup level has no codebook and is left out;
  ``stats.json`` lists it under ``codebooks_omitted``.
- ``stats.json``: per-level utilization and perplexity, collisions before and
  after handling, timings, training curve and warnings.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from geodiag.atomic import atomic_dir
from geodiag.errors import InputError
from geodiag.io.vocabulary.sidecar import CODEBOOKS_FILENAME, Level, SemanticIds, level_name, save
from gti.checkpoint_files import check_output_dir
from gti.data.sources import load_dataset
from gti.models.backbone import Backbone, resolve_backbone
from gti.semantic_ids.collisions import COLLISION_STRATEGIES, Resolved
from gti.semantic_ids.config import RQVAEConfig, SidsConfig
from gti.semantic_ids.embeddings import bow_embeddings, lm_embeddings
from gti.semantic_ids.fit_cache import train_or_load
from gti.semantic_ids.rqvae import RQVAEResult
from gti.semantic_ids.stats import collision_stats, level_stats

SIDECAR_FILENAME = "semantic_ids.json"
STATS_FILENAME = "stats.json"
OUTPUT_FILES = (SIDECAR_FILENAME, CODEBOOKS_FILENAME, STATS_FILENAME)

log = logging.getLogger(__name__)


@dataclass
class SidsResult:
    out: Path
    sids: SemanticIds
    stats: dict[str, object]


def effective_codebook_size(n_items: int, requested: int) -> tuple[int, str | None]:
    """k-means cannot place K codes on fewer than K items: shrink K to the largest
    power of two <= n_items (powers of two as in TIGER/LC-Rec), with a warning."""
    if n_items >= requested:
        return requested, None
    if n_items < 2:
        raise InputError("--data", f"{n_items} item(s): semantic IDs need at least 2 items")
    k = 1 << (n_items.bit_length() - 1)
    return k, f"{n_items} items < --codebook-size {requested}: using {k} codes per level"


def build_sids(cfg: SidsConfig) -> SidsResult:
    """Run the whole stage; every figure it measures ends up in ``stats.json``."""
    cfg.validate()
    out = Path(cfg.out)
    check_output_dir(out, SIDECAR_FILENAME, only=OUTPUT_FILES)  # fail before spending minutes
    timings: dict[str, float] = {}
    t0 = time.perf_counter()

    dataset = load_dataset(cfg.data, cfg.cache_dir)
    backbone = resolve_backbone(
        cfg.model, cache_dir=cfg.cache_dir, allow_download=cfg.allow_download, seed=cfg.seed
    )
    timings["load_s"] = time.perf_counter() - t0

    t = time.perf_counter()
    texts = dataset.catalog.texts
    embeddings, n_computed = encode(texts, backbone, cfg)
    timings["encode_s"] = time.perf_counter() - t

    k, shrunk = effective_codebook_size(len(texts), cfg.rqvae.codebook_size)
    rq_cfg = RQVAEConfig(**{**asdict(cfg.rqvae), "codebook_size": k, "seed": cfg.seed})
    t = time.perf_counter()
    fit, fit_cached = train_or_load(
        embeddings, rq_cfg, cache_dir=cfg.cache_dir, progress=cfg.progress
    )
    timings["rqvae_s"] = time.perf_counter() - t

    t = time.perf_counter()
    resolved = resolve_collisions(fit, cfg.strategy, cfg.seed)
    notes = ([shrunk] if shrunk else []) + resolved.notes
    timings["collisions_s"] = time.perf_counter() - t
    for note in notes:
        log.warning("warning: %s", note)

    names = [level_name(i) for i in range(len(resolved.level_sizes))]
    sids = sidecar(cfg, dataset.catalog.item_ids, backbone, resolved, names)
    timings["total_s"] = time.perf_counter() - t0
    stats = {
        "data": cfg.data,
        "n_items": len(texts),
        "model": backbone.name,
        "encoder": cfg.encoder,
        "embedding_dim": int(embeddings.shape[1]),
        "embeddings_computed": n_computed,
        "rqvae_from_cache": fit_cached,
        **codes_stats(cfg, rq_cfg, fit, resolved, names),
        "timings": timings,
        "warnings": notes,
    }
    codebooks = {nm: fit.codebooks[i] for i, nm in enumerate(names[: rq_cfg.n_levels])}
    write_outputs(out, sids, codebooks, stats)
    return SidsResult(out, sids, stats)


def encode(texts: list[str], backbone: Backbone, cfg: SidsConfig) -> tuple[np.ndarray, int]:
    """Content embeddings of ``texts`` by ``cfg.encoder``, (n_items, dim); and how many
    were computed rather than read from the cache."""
    if cfg.encoder == "lm":
        return lm_embeddings(
            texts,
            backbone,
            batch_size=cfg.embed_batch_size,
            max_length=cfg.max_length,
            cache_dir=cfg.cache_dir,
            progress=cfg.progress,
        )
    return bow_embeddings(texts, cfg.bow_dim), len(texts)


def resolve_collisions(fit: RQVAEResult, strategy: str, seed: int) -> Resolved:
    """Unique SIDs from the RQ-VAE's codes by ``strategy`` (the collision registry)."""
    resolved = COLLISION_STRATEGIES[strategy](
        codes=fit.codes,
        last_residuals=fit.last_residuals,
        last_codebook=fit.codebooks[-1],
        generator=np.random.default_rng(seed),
    )
    if collision_stats(resolved.codes).n_groups:  # a strategy bug must not ship ambiguous SIDs
        raise RuntimeError(f"strategy {strategy} left colliding SIDs")
    return resolved


def sidecar(
    cfg: SidsConfig, item_ids: list[str], backbone: Backbone, resolved: Resolved, names: list[str]
) -> SemanticIds:
    """The ``semantic_ids.json`` of the stage: levels, each item's codes, provenance."""
    return SemanticIds(
        base_vocab_size=backbone.vocab_size,
        levels=[
            Level(name=nm, size=sz) for nm, sz in zip(names, resolved.level_sizes, strict=True)
        ],
        items={
            iid: [int(c) for c in row] for iid, row in zip(item_ids, resolved.codes, strict=True)
        },
        provenance={
            "stage": "sids",
            "step": 0,
            "seed": cfg.seed,
            "source_model": backbone.name,
            "source_model_identity": backbone.identity,
            "strategy": resolved.strategy_used,
            "encoder": cfg.encoder,
            "data": cfg.data,
        },
    )


def codes_stats(
    cfg: SidsConfig, rq_cfg: RQVAEConfig, fit: RQVAEResult, resolved: Resolved, names: list[str]
) -> dict[str, object]:
    """What ``stats.json`` says of the codes: strategy, codebook size, per-level use,
    collisions before and after, the RQ-VAE's settings and training curve."""
    return {
        "strategy": cfg.strategy,
        "strategy_used": resolved.strategy_used,
        "codebook_size_requested": cfg.rqvae.codebook_size,
        "codebook_size": rq_cfg.codebook_size,
        "levels": [
            asdict(level_stats(resolved.codes[:, i], sz, nm, learned=i < rq_cfg.n_levels))
            for i, (nm, sz) in enumerate(zip(names, resolved.level_sizes, strict=True))
        ],
        "collisions_before": asdict(collision_stats(fit.codes)),
        "collisions_after": asdict(collision_stats(resolved.codes)),
        "n_reassigned": resolved.n_reassigned,
        "codebooks_omitted": names[rq_cfg.n_levels :],
        "rqvae": asdict(rq_cfg),
        "training": {
            "final": fit.history[-1],
            "curve": fit.history[:: max(1, len(fit.history) // 20)],
        },
    }


def write_outputs(
    out: Path, sids: SemanticIds, codebooks: dict[str, np.ndarray], stats: dict
) -> None:
    from safetensors.numpy import save_file

    with atomic_dir(out) as tmp:
        save(sids, tmp / SIDECAR_FILENAME)
        save_file(
            {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in codebooks.items()},
            tmp / CODEBOOKS_FILENAME,
        )
        (tmp / STATS_FILENAME).write_text(json.dumps(stats, indent=1, allow_nan=False))
