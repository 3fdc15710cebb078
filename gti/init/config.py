"""Configs of ``gti init``. Import-light (no torch) so ``gti --help`` stays fast.

Defaults reproduce the paper's grounding stage (arXiv 2604.02324: AdamW, lr 1e-3,
8,000 steps x batch 128) unless a field says why it differs. ``PRESETS`` size
the run for the hardware at hand; explicit ``--steps`` / ``--batch-size`` win.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from geodiag.errors import InputError
from geodiag.settings import REQUIRED, check_bounds, setting
from gti.options import RESUMABLE, RUNNER, cache_dir_setting, check_device, progress_setting

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
    """The GTI grounding stage: only the new rows train, every other weight frozen.

    Fields with ``help`` are ``gti init`` options (``geodiag.settings``); steps, batch
    size and lr default to the preset on the command line (None there: the preset's).
    A new grounding setting is one field here.
    """

    steps: int = setting(
        PRESETS["paper"][0],
        help="Grounding steps (overrides the preset).",
        cli_type=int | None,
        cli_default=None,
        ge=1,
        tags=(RESUMABLE,),
    )
    batch_size: int = setting(
        PRESETS["paper"][1],
        help="Grounding batch size (overrides the preset).",
        cli_type=int | None,
        cli_default=None,
        ge=1,
    )
    lr: float = setting(
        PRESETS["paper"][2],
        help="AdamW learning rate (overrides the preset; paper: 1e-3).",
        cli_type=float | None,
        cli_default=None,
        gt=0,
    )
    # Resume state is written every this many steps (and on SIGINT/SIGTERM).
    save_every: int = setting(25, help="Save resume state every N steps.", ge=1, tags=(RESUMABLE,))
    # The paper states no schedule or decay for grounding; embeddings are usually
    # trained without weight decay, and decay would pull the new rows to 0.
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    seed: int = setting(0, tags=(RUNNER,))  # gti init: its --seed
    # Item texts longer than this (characters) are cut: a catalog with long
    # descriptions would otherwise blow up the sequence length; ML-100k texts are < 120.
    max_text_chars: int = 400
    progress: bool = progress_setting()

    def validate(self) -> None:
        check_bounds(self)


@dataclass
class InitConfig:
    """One run of ``gti init``: extend the vocabulary of a backbone with the SIDs of
    ``sids`` and initialize the new rows with ``strategy``. Fields with ``help`` are
    ``gti init`` options."""

    out: Path = setting(
        Path("runs/ml100k/gti/init"),
        help="Checkpoint folder to write (atomically).",
        flags=("-o", "--out"),
        cli_default=REQUIRED,
    )
    sids: Path = setting(
        Path("runs/ml100k/sids"), help="Folder written by `gti sids build`.", flags=("--sids",)
    )
    strategy: str = setting("gti", help=f"New-row initialization: {' | '.join(STRATEGIES)}.")
    # Where GTI's grounding starts; the paper starts from the mean (Hewitt) init.
    start_from: str = setting("mean", help="Row init that gti grounding starts from (paper: mean).")
    # None: what the sids folder was built with (its provenance), so the new
    # tokens land in the same backbone and pair with the same item texts.
    model: str | None = setting(
        None, help="smollm2-135m | tiny | a local HF folder (default: the sids' model)."
    )
    data: str | None = setting(
        None,
        help="movielens-100k | synthetic | jsonl:CATALOG,INTERACTIONS (default: the sids' data).",
    )
    seed: int = setting(0, help="Seed of the init and the data order.")
    # "auto": CUDA when available, else CPU.
    device: str = setting("auto", help="auto | cpu | cuda[:N].")
    allow_download: bool = setting(False, help="Let a hub id download from the hub.")
    cache_dir: Path | None = cache_dir_setting()
    grounding: GroundingConfig = field(default_factory=GroundingConfig)

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
        check_device(self.device)
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
