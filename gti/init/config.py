"""Configs of ``gti init``. Import-light (no torch) so ``gti --help`` stays fast.

Defaults reproduce the paper's grounding stage (arXiv 2604.02324: AdamW, lr 1e-3,
8,000 steps x batch 128) unless a field says why it differs. ``PRESETS`` size
the run for the hardware at hand; explicit ``--steps`` / ``--batch-size`` win.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from geodiag.errors import InputError
from geodiag.settings import setting
from gti.options import RESUMABLE, RUNNER, UI

# Row strategies (one function each, gti.init.REGISTRY) plus the grounding stage.
ROW_STRATEGIES = ("mean", "mean-noise", "random", "description-mean")
STRATEGIES = (*ROW_STRATEGIES, "gti")

# (steps, batch, lr) per preset; explicit --steps/--batch-size/--lr win.
# ``cpu``: 4,000 examples, about 1.2 passes over the 3,364 (item, direction) pairs of
# MovieLens-100k; measured ~35 min for SmolLM2-135M on an idle 2-core machine (8.2 to
# 8.9 s/step). With 30x fewer steps than the paper, lr 1e-3 barely moves the rows
# (measured on ML-100k after 25 steps: mean shift 0.17 in norm against a vocabulary
# spread of 2.4, mean cosine 0.997), so this preset uses 1e-2. Measured RSA of level a
# against its codebook: 0.017 (p = 0.06) after 100 steps, 0.039 (p = 3e-4) after 250;
# levels b and c show none yet. ``tiny``: tests and smoke runs.
PRESETS: dict[str, tuple[int, int, float]] = {
    "paper": (8000, 128, 1e-3),
    "cpu": (250, 16, 1e-2),
    "tiny": (4, 4, 1e-3),
}


@dataclass
class GroundingConfig:
    """The GTI grounding stage: only the new rows train, every other weight frozen."""

    steps: int = setting(PRESETS["paper"][0], tags=(RESUMABLE,))
    batch_size: int = PRESETS["paper"][1]
    lr: float = PRESETS["paper"][2]
    # The paper states no schedule or decay for grounding; embeddings are usually
    # trained without weight decay, and decay would pull the new rows to 0.
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    seed: int = setting(0, tags=(RUNNER,))
    # Resume state is written every this many steps (and on SIGINT/SIGTERM).
    save_every: int = setting(25, tags=(RESUMABLE,))
    # Item texts longer than this (characters) are cut: a catalog with long
    # descriptions would otherwise blow up the sequence length; ML-100k texts are < 120.
    max_text_chars: int = 400
    progress: bool = setting(True, tags=(RUNNER, UI))

    def validate(self) -> None:
        if self.steps < 1:
            raise InputError("--steps", f"must be >= 1, got {self.steps}")
        if self.batch_size < 1:
            raise InputError("--batch-size", f"must be >= 1, got {self.batch_size}")
        if not self.lr > 0:
            raise InputError("--lr", f"must be > 0, got {self.lr}")
        if self.save_every < 1:
            raise InputError("--save-every", f"must be >= 1, got {self.save_every}")


@dataclass
class InitConfig:
    """One run of ``gti init``: extend the vocabulary of a backbone with the SIDs of
    ``sids`` and initialize the new rows with ``strategy``."""

    sids: Path = Path("runs/ml100k/sids")
    out: Path = Path("runs/ml100k/gti/init")
    strategy: str = "gti"
    # Where GTI's grounding starts; the paper starts from the mean (Hewitt) init.
    start_from: str = "mean"
    # None: what the sids folder was built with (its provenance), so the new
    # tokens land in the same backbone and pair with the same item texts.
    model: str | None = None
    data: str | None = None
    seed: int = 0
    grounding: GroundingConfig = field(default_factory=GroundingConfig)
    cache_dir: Path | None = None
    allow_download: bool = False
    # "auto": CUDA when available, else CPU.
    device: str = "auto"

    def validate(self) -> None:
        if self.strategy not in STRATEGIES:
            raise InputError(
                "--strategy",
                f"unknown strategy {self.strategy!r}; choose from {', '.join(STRATEGIES)}",
            )
        if self.start_from not in ROW_STRATEGIES:
            raise InputError(
                "--start-from",
                f"unknown start {self.start_from!r}; choose from {', '.join(ROW_STRATEGIES)}",
            )
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise InputError("--device", f"expected auto, cpu or cuda[:N], got {self.device!r}")
        if self.strategy == "gti":
            self.grounding.validate()


def apply_preset(
    preset: str, steps: int | None = None, batch_size: int | None = None, lr: float | None = None
) -> tuple[int, int, float]:
    """(steps, batch, lr) of ``preset``, explicit values taking precedence."""
    if preset not in PRESETS:
        raise InputError("--preset", f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
    p_steps, p_batch, p_lr = PRESETS[preset]
    return (
        p_steps if steps is None else steps,
        p_batch if batch_size is None else batch_size,
        p_lr if lr is None else lr,
    )
