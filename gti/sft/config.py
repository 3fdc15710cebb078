"""Config of ``gti sft``. Import-light (no torch) so ``gti --help`` stays fast.

Defaults reproduce the paper's SFT stage (arXiv 2604.02324: all parameters
trained for as many steps as grounding, 8,000 x batch 128) unless a field says
why it differs. The CPU presets of ``configs/`` scale steps and batch down.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from geodiag.errors import InputError

# "next-item": plain SFT (the paper's GTI + SFT). "lcrec": next item plus the two
# alignment tasks of LC-Rec (item text -> SID, SID -> item text), mixed by ``align_ratio``.
TASKS = ("next-item", "lcrec")
# Parts that can be frozen: the decoder blocks + final norm, or the input embedding
# and the output head (all rows, old and new).
FREEZABLE = ("layers", "embeddings")
DTYPES = ("float32", "float64")


@dataclass
class SFTConfig:
    """One run of ``gti sft``: fine-tune an initialized checkpoint for next-item generation."""

    init: Path = Path("runs/ml100k/gti/init")  # a checkpoint written by `gti init`
    out: Path = Path("runs/ml100k/gti/sft")
    # None: the dataset the checkpoint's semantic IDs were built from (its provenance).
    data: str | None = None
    tasks: str = "next-item"
    # Share of alignment examples in the "lcrec" mix (half text->SID, half SID->text).
    # LC-Rec mixes its tasks by dataset size; 0.25 keeps next-item the main task.
    align_ratio: float = 0.25
    steps: int = 8000
    batch_size: int = 128  # global: examples per optimizer step, over all processes
    micro_batch_size: int = 8  # per process and forward; the rest is gradient accumulation
    # The paper does not state its SFT learning rate; 1e-4 is a common full fine-tuning
    # rate for sub-1B backbones (LC-Rec used 5e-5 on a 7B one).
    lr: float = 1e-4
    min_lr_ratio: float = 0.1  # cosine decays to lr * this
    warmup_steps: int = 100
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    max_grad_norm: float = 1.0
    # Sequences as TIGER / LC-Rec: 5-core, chronological leave-one-out, last 20 items.
    k_core: int = 5
    max_history: int = 20
    titles: bool = False  # write each history item as "<a_1><b_2><c_3> (title)"
    max_text_chars: int = 400  # item texts of the alignment tasks are cut here
    freeze: tuple[str, ...] = ()  # subset of FREEZABLE; the paper trains everything
    seed: int = 0
    save_every: int = 200  # resume state every N steps (and on SIGINT/SIGTERM)
    bf16: bool = True  # bf16 autocast on CUDA; ignored on CPU (float32 there)
    # Weights and arithmetic of the run, and of the checkpoint it writes. float64 is for
    # equivalence checks (tests): rounding then stays far below any tolerance that
    # matters, on every CPU kernel, even after AdamW's amplification of tiny gradients.
    dtype: str = "float32"
    device: str = "auto"  # auto | cpu | cuda
    arm: str | None = None  # experiment arm name, recorded in the provenance
    cache_dir: Path | None = None
    progress: bool = True

    def validate(self, world_size: int = 1) -> int:
        """Check every field; returns the gradient-accumulation steps per optimizer step."""
        if self.tasks not in TASKS:
            raise InputError("--tasks", f"unknown tasks {self.tasks!r}; choose from {TASKS}")
        if not 0 <= self.align_ratio < 1:
            raise InputError("--align-ratio", f"must be in [0, 1), got {self.align_ratio}")
        for name in ("steps", "batch_size", "micro_batch_size", "save_every", "max_history"):
            if getattr(self, name) < 1:
                flag = "--" + name.replace("_", "-")
                raise InputError(flag, f"must be >= 1, got {getattr(self, name)}")
        if self.k_core < 1:
            raise InputError("--k-core", f"must be >= 1, got {self.k_core}")
        if not self.lr > 0:
            raise InputError("--lr", f"must be > 0, got {self.lr}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise InputError("--min-lr-ratio", f"must be in [0, 1], got {self.min_lr_ratio}")
        if self.warmup_steps < 0:
            raise InputError("--warmup-steps", f"must be >= 0, got {self.warmup_steps}")
        bad = [f for f in self.freeze if f not in FREEZABLE]
        if bad:
            raise InputError("--freeze", f"unknown part {bad[0]!r}; choose from {FREEZABLE}")
        if set(self.freeze) == set(FREEZABLE):
            raise InputError("--freeze", "freezing layers and embeddings leaves nothing to train")
        if self.dtype not in DTYPES:
            raise InputError("--dtype", f"expected {' or '.join(DTYPES)}, got {self.dtype!r}")
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise InputError("--device", f"expected auto, cpu or cuda[:N], got {self.device!r}")
        per_step = self.micro_batch_size * world_size
        if self.batch_size % per_step:
            raise InputError(
                "--batch-size",
                f"{self.batch_size} is not a multiple of --micro-batch-size x processes "
                f"({self.micro_batch_size} x {world_size}); pick sizes that divide",
            )
        return self.batch_size // per_step
