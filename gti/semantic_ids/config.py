"""Configs of the semantic-ID entry points. Import-light (no torch) so the CLI
can show their defaults in ``--help`` without paying for torch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from geodiag.errors import InputError
from geodiag.settings import REQUIRED, setting
from gti.models.smollm2 import NAME as DEFAULT_MODEL
from gti.options import PATH, RUNNER, cache_dir_setting, progress_setting
from gti.semantic_ids.collisions import COLLISION_STRATEGIES

ENCODERS = ("lm", "bow")


@dataclass
class RQVAEConfig:
    """Defaults reproduce the main experiment (MovieLens-100k, SmolLM2 embeddings).

    Architecture as TIGER/LC-Rec: MLP 512-256-128 down to a 32-d latent, 3 levels
    of 256 codes, commitment weight 0.25, k-means codebook init. Training differs
    from their 20k epochs on GPU, because k-means init starts the codebooks on the
    data and CPU time is the budget. Measured on ML-100k (1,682 items, batch 256 =
    7 steps/epoch, ~0.4 s CPU per epoch on one core): the chance that two items
    sharing a level-1 code share a genre is 0.54 after 20 epochs, 0.63 after 50,
    0.66 after 100 and 0.66 after 200 (random pairs: 0.35); reconstruction keeps
    improving slowly, the codes' semantics do not. Hence 100 epochs (~40 s).
    Batch 1024 was no cheaper per epoch and less converged at 100 epochs.
    """

    n_levels: int = setting(3, help="RQ-VAE levels.", flags=("--levels",))
    codebook_size: int = setting(256, help="Codes per level.")
    latent_dim: int = 32
    hidden_dims: tuple[int, ...] = (512, 256, 128)
    beta: float = 0.25  # commitment weight
    lr: float = 1e-3
    epochs: int = setting(100, help="RQ-VAE training epochs.")
    batch_size: int = setting(256, help="RQ-VAE batch size.")
    kmeans_iters: int = 25
    # Dead codes are re-seeded at each epoch end during this fraction of training;
    # the rest lets the re-seeded codes settle before the codes are read off.
    reseed_until: float = 0.8
    # Per-dimension z-scoring. Mean-pooled SmolLM2 states have uneven scales (std
    # 3.4 on the widest dimension vs 0.24 median, means up to 29 on ML-100k) that
    # would dominate the MSE and k-means; on the synthetic catalog's bag-of-words
    # vectors, skipping it collapsed level 1 (ARI 0.0 instead of 0.83, measured).
    standardize: bool = True
    # One intra-op thread: the matmuls here are small, so a second thread adds only
    # synchronization, and on a shared machine OpenMP spin-waiting made 2 threads
    # 3x slower in wall time and 7x in CPU time (measured on the 2-core box).
    n_threads: int = 1
    seed: int = setting(0, tags=(RUNNER,))


@dataclass
class SidsConfig:
    """One run of ``gti sids build``; defaults are the main experiment (ML-100k, SmolLM2)."""

    out: Path = setting(
        Path("runs/ml100k/sids"),
        help="Output folder (written atomically).",
        flags=("-o", "--out"),
        cli_default=REQUIRED,
        tags=(RUNNER, PATH),
    )
    data: str = setting(
        "movielens-100k",
        help="movielens-100k | synthetic | jsonl:CATALOG.jsonl,INTERACTIONS.csv "
        "(JSONL lines: item_id + text fields; interactions: user_id,item_id,timestamp header; .tsv = tabs).",
    )
    model: str = setting(
        DEFAULT_MODEL,
        help=f"{DEFAULT_MODEL} | tiny | a local HF folder | a hub id (local cache only).",
    )
    # "lm" (backbone mean-pool) or "bow" (hashed words; offline tests).
    encoder: str = setting("lm", help="lm (backbone mean-pool) | bow (hashed words, no model).")
    # sinkhorn keeps every SID at n_levels tokens, as LC-Rec.
    strategy: str = setting("sinkhorn", help="Collision handling: sinkhorn | dedup-level.")
    rqvae: RQVAEConfig = setting(default_factory=RQVAEConfig, nested=True)
    seed: int = setting(0, help="Seed for every random choice.")
    embed_batch_size: int = 64  # fastest of 16/64/256 for SmolLM2 on 2 CPU cores
    max_length: int = 256  # tokens per item text; ML-100k texts are at most 35
    bow_dim: int = 512
    # Hub ids only: may transformers download?
    allow_download: bool = setting(False, help="Let a hub id download from the hub.")
    progress: bool = progress_setting("Show progress bars.")
    cache_dir: Path | None = cache_dir_setting()

    def validate(self) -> None:
        if self.encoder not in ENCODERS:
            raise InputError("--encoder", f"must be one of {list(ENCODERS)}, got {self.encoder!r}")
        if self.strategy not in COLLISION_STRATEGIES:
            raise InputError(
                "--strategy", f"must be one of {list(COLLISION_STRATEGIES)}, got {self.strategy!r}"
            )
        # 25 leaves one letter for the dedup level.
        if not 1 <= self.rqvae.n_levels <= 25:
            raise InputError("--levels", f"must be between 1 and 25, got {self.rqvae.n_levels}")
        if self.rqvae.codebook_size < 2:
            raise InputError(
                "--codebook-size", f"must be at least 2, got {self.rqvae.codebook_size}"
            )
        if self.rqvae.epochs < 1:
            raise InputError("--epochs", f"must be at least 1, got {self.rqvae.epochs}")
        if self.rqvae.batch_size < 1:
            raise InputError("--batch-size", f"must be at least 1, got {self.rqvae.batch_size}")
