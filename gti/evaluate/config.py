"""Config of ``gti evaluate``. Import-light (no torch) so ``gti --help`` stays fast."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from geodiag.errors import InputError
from gti.sft.config import DTYPES

SPLITS = ("valid", "test")
DEFAULT_KS = (1, 5, 10, 20)


@dataclass
class EvalConfig:
    """Recall@K / NDCG@K of a checkpoint on the leave-one-out validation and test users.

    The prompt settings (k-core, history length, titles) default to what the
    checkpoint was fine-tuned with (its ``sft_config.json``), else to SFT's defaults.
    """

    checkpoint: Path = Path("runs/ml100k/gti/sft")
    out: Path | None = None  # JSON with every number; None: not written
    data: str | None = None  # None: the dataset of the checkpoint's SIDs
    splits: tuple[str, ...] = SPLITS
    ks: tuple[int, ...] = DEFAULT_KS
    beams: int = 20  # beam size; >= max(ks), as every metric needs that many items
    exact: bool = False  # score every item instead of beam search (small catalogs / GPU)
    batch_size: int = 8  # users per forward; the beams multiply it (8 x 20 rows)
    max_users: int | None = None  # a seeded sample of users (same for every split); None: all
    seed: int = 0
    k_core: int | None = None
    max_history: int | None = None
    titles: bool | None = None
    device: str = "auto"
    dtype: str = "float32"  # of the model's weights and arithmetic; float64 for checks
    cache_dir: Path | None = None
    progress: bool = True

    def validate(self) -> None:
        bad = [s for s in self.splits if s not in SPLITS]
        if bad or not self.splits:
            raise InputError(
                "--split", f"unknown split {bad[0] if bad else None!r}; choose from {SPLITS}"
            )
        if not self.ks or min(self.ks) < 1:
            raise InputError("--k", f"every K must be >= 1, got {list(self.ks)}")
        if self.beams < max(self.ks):
            raise InputError(
                "--beams",
                f"{self.beams} beams cannot fill a top-{max(self.ks)} list; use >= {max(self.ks)}",
            )
        if self.batch_size < 1:
            raise InputError("--batch-size", f"must be >= 1, got {self.batch_size}")
        if self.max_users is not None and self.max_users < 1:
            raise InputError("--max-users", f"must be >= 1, got {self.max_users}")
        if self.dtype not in DTYPES:
            raise InputError("--dtype", f"expected {' or '.join(DTYPES)}, got {self.dtype!r}")
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise InputError("--device", f"expected auto, cpu or cuda[:N], got {self.device!r}")
