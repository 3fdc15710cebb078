"""How a checkpoint is measured: :class:`AnalyzeOptions` (one definition of each setting,
turned into the measuring flags of ``metrics``, ``check`` and ``drift`` by
``geodiag.settings``, and into the defaults of ``geodiag.measure``)."""

from __future__ import annotations

from dataclasses import dataclass

from geodiag.settings import check_bounds, setting


@dataclass(frozen=True)
class AnalyzeOptions:
    """The measuring settings; a field with help is a flag of the commands that measure,
    with its default (``--permutations``, ``--seed``, ``--neighbors``). The metric
    functions take these values from the caller and have no defaults of their own."""

    # Default: as many original rows as new ones, capped at reference_cap.
    reference_size: int | None = setting(None, ge=1)
    reference_cap: int = setting(20_000, ge=1)
    n_permutations: int = setting(
        1000,
        help="RSA permutations for the p-value.",
        flags=("--permutations",),
        ge=0,
        show_bounds=True,
    )
    seed: int = setting(
        0, help="Seed of the vocabulary sample and the permutations.", flags=("--seed",)
    )
    # RSA on a seeded sample above this many tokens per level.
    rsa_max_items: int = setting(1000, ge=3)
    neighbors_k: int = setting(
        5, help="Nearest original tokens per new token (0: off).", flags=("--neighbors",), ge=0
    )
    # Nearest originals for a seeded sample of this many new tokens.
    neighbors_max: int = setting(500, ge=0)
    # A remote checkpoint's vocabulary figures come from this many original rows (the
    # reference sample's order: reference_cap), in this many blocks of consecutive rows,
    # unless --full-vocabulary (geodiag.metrics.vocabulary_sample). 20 blocks: a standard
    # error from 19 degrees of freedom; 1,000 rows each: one request per block.
    vocabulary_sample_rows: int = setting(20_000, ge=2)
    vocabulary_sample_blocks: int = setting(20, ge=2)

    def __post_init__(self) -> None:
        check_bounds(self)
