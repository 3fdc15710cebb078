"""Config of ``gti evaluate``. Import-light (no torch) so ``gti --help`` stays fast."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from geodiag.errors import InputError
from geodiag.settings import REQUIRED, check_bounds, setting
from gti.evaluate.metrics import DEFAULT_KS
from gti.options import (
    PATH,
    RUNNER,
    cache_dir_setting,
    check_device,
    check_dtype,
    dtype_setting,
    progress_setting,
)

SPLITS = ("valid", "test")


def _repeatable(default: tuple, item: type, flag: str, help: str):
    """A tuple setting given as a repeatable flag, ``default`` when the flag is absent."""
    return setting(
        default,
        help=help,
        flags=(flag,),
        cli_type=list[item] | None,
        cli_default=None,
        parse=lambda given: tuple(given) if given else default,
    )


@dataclass
class EvalConfig:
    """Recall@K / NDCG@K of a checkpoint on the leave-one-out validation and test users.

    The prompt settings (k-core, history length, titles, system prompt) default to what the
    checkpoint was fine-tuned with (its ``sft_config.json``), else to SFT's defaults.
    """

    checkpoint: Path = setting(
        Path("runs/ml100k/gti/sft"),
        help="Checkpoint written by `gti sft`.",
        argument=True,
        cli_default=REQUIRED,
        tags=(RUNNER, PATH),
    )
    out: Path | None = setting(  # JSON with every number; None: not written
        None,
        help="Write every number to this JSON file.",
        flags=("-o", "--out"),
        tags=(RUNNER, PATH),
    )
    data: str | None = setting(  # None: the dataset of the checkpoint's SIDs
        None, help="Dataset (default: the one the SIDs were built from)."
    )
    splits: tuple[str, ...] = _repeatable(
        SPLITS, str, "--split", f"{' | '.join(SPLITS)} (repeatable; default both)."
    )
    ks: tuple[int, ...] = _repeatable(
        DEFAULT_KS,
        int,
        "--k",
        f"K of Recall@K/NDCG@K (repeatable; default {' '.join(map(str, DEFAULT_KS))}).",
    )
    # Beam size; >= max(ks), as every metric needs that many items.
    beams: int = setting(20, help="Beam size (>= the largest K).")
    # Score every item instead of beam search (small catalogs / GPU).
    exact: bool = setting(
        False,
        help="Score every item of the catalog instead of beam search.",
        flags=("--exact",),
    )
    # Users per forward; the beams multiply it (8 x 20 rows).
    batch_size: int = setting(8, help="Users per forward pass.", ge=1)
    # A seeded sample of users (same for every split); None: all.
    max_users: int | None = setting(None, help="Evaluate a seeded sample of this many users.", ge=1)
    seed: int = setting(0, help="Seed of the user sample.")
    k_core: int | None = setting(
        None,
        help="Keep users/items with >= this many events (default: as the checkpoint was trained).",
    )
    max_history: int | None = setting(
        None, help="Items of history in a prompt (default: as the checkpoint was trained)."
    )
    titles: bool | None = setting(
        None,
        help="Titles beside history SIDs (default: as trained).",
        flags=("--titles/--no-titles",),
    )
    system_prompt: str | None = setting(
        None, help="System turn of every prompt (default: as trained)."
    )
    device: str = setting("auto", help="auto | cpu | cuda.", tags=(RUNNER,))
    dtype: str = dtype_setting()  # of the model's weights and arithmetic; float64 for checks
    progress: bool = progress_setting()
    cache_dir: Path | None = cache_dir_setting()

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
        check_bounds(self)
        check_dtype(self.dtype)
        check_device(self.device)
