"""How a checkpoint is measured: :class:`AnalyzeOptions`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AnalyzeOptions:
    reference_size: int | None = None  # default: as many original rows as new ones (capped)
    reference_cap: int = 20_000
    seed: int = 0
    n_permutations: int = 1000
    rsa_max_items: int = 1000  # RSA on a seeded sample above this many tokens per level
    neighbors_k: int = 5
    neighbors_max: int = 500  # nearest originals for a seeded sample of this many new tokens
