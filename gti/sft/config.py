"""Config of ``gti sft``. Import-light (no torch) so ``gti --help`` stays fast.

Defaults reproduce the paper's SFT stage (arXiv 2604.02324: all parameters
trained for as many steps as grounding, 8,000 x batch 128) unless a field says
why it differs. The CPU presets of ``configs/`` scale steps and batch down.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from geodiag.errors import InputError
from geodiag.settings import check_bounds, setting
from gti.options import (
    PATH,
    PROMPT_DEFAULTS,
    RESUMABLE,
    RUNNER,
    SYSTEM_PROMPT_HELP,
    cache_dir_setting,
    check_device,
    check_dtype,
    dtype_setting,
    progress_setting,
)

# "next-item": plain SFT (the paper's GTI + SFT). "lcrec": next item plus the two
# alignment tasks of LC-Rec (item text -> SID, SID -> item text), mixed by ``align_ratio``.
TASKS = ("next-item", "lcrec")
# Parts that can be frozen: the decoder blocks + final norm, or the input embedding
# and the output head (all rows, old and new).
FREEZABLE = ("layers", "embeddings")
# "example": one prompt (chat turn + instruction + history) per next item, the loss on
# its answer. "sequence": each user's training history packed as one SID sequence, the
# next-item loss at every item (gti.sft.sequence), ~30x fewer tokens per epoch.
OBJECTIVES = ("example", "sequence")
BF16_MODES = ("auto", "on", "off")


@dataclass
class SFTConfig:
    """One run of ``gti sft``: fine-tune an initialized checkpoint for next-item generation.

    Each field is declared once: its ``help`` makes it a ``gti sft`` option, its tags
    (``gti.roles``) say whether the experiment runner sets it, whether a resumed run
    may change it, and whether it is recorded. A new hyperparameter is one field.
    """

    init: Path = setting(  # a checkpoint written by `gti init`
        Path("runs/ml100k/gti/init"),
        help="Checkpoint written by `gti init`.",
        flags=("--init",),
        tags=(RUNNER, PATH),
    )
    out: Path = setting(
        Path("runs/ml100k/gti/sft"),
        help="Checkpoint folder to write (atomically).",
        flags=("-o", "--out"),
        tags=(RUNNER, PATH, RESUMABLE),
    )
    # None: the dataset the checkpoint's semantic IDs were built from (its provenance).
    data: str | None = setting(
        None,
        help="movielens-100k | synthetic | jsonl:CATALOG,INTERACTIONS (default: the SIDs' data).",
    )
    # The paper trains on prompts; "sequence" is this project's cheaper epoch (DESIGN.md,
    # "Training at budgets that decide"), kept opt-in until runs show it matches.
    objective: str = setting(
        "example",
        help=f"{' | '.join(OBJECTIVES)} (sequence: packed histories, a loss at every item).",
    )
    # Sequence windows, in items. Overlap window - stride = 20 = --max-history's default:
    # an item of a later window is predicted from at least the 20 items today's prompts
    # show, and each item is in the loss once; long histories cost 64/44 = 1.45x their
    # tokens. 64 items (~260 tokens with the separator) keeps attention cheap.
    window: int = setting(64, help="Items per sequence window (--objective sequence).", ge=2)
    stride: int = setting(44, help="Items between window starts (< --window).", ge=1)
    # The sequence's text around the SIDs: by default the history span of today's
    # next-item prompt, so the sequence is the same tokens as that span.
    sequence_prefix: str = setting(
        "A user interacted with these items, oldest first: ",
        help="Text before a sequence's first item (--objective sequence).",
    )
    separator: str = setting(", ", help="Text between items of a sequence (--objective sequence).")
    tasks: str = setting(
        "next-item",
        help=f"{' | '.join(TASKS)} (lcrec adds text<->SID alignment tasks).",
        tags=(RUNNER,),
    )
    # Share of alignment examples in the "lcrec" mix (half text->SID, half SID->text).
    # LC-Rec mixes its tasks by dataset size; 0.25 keeps next-item the main task.
    align_ratio: float = setting(
        0.25, help="Share of alignment examples in the lcrec mix.", ge=0, lt=1
    )
    steps: int = setting(8000, help="Optimizer steps (paper: 8000).", ge=1, tags=(RESUMABLE,))
    batch_size: int = setting(  # global: examples per optimizer step, over all processes
        128, help="Global batch: examples per optimizer step (paper: 128).", ge=1
    )
    micro_batch_size: int = setting(  # per process and forward; the rest is accumulation
        8,
        help="Examples per forward and process; the rest is accumulation.",
        ge=1,
        tags=(RESUMABLE,),
    )
    # The paper does not state its SFT learning rate; 1e-4 is a common full fine-tuning
    # rate for sub-1B backbones (LC-Rec used 5e-5 on a 7B one).
    lr: float = setting(1e-4, help="Peak AdamW learning rate.", gt=0)
    warmup_steps: int = setting(100, help="Linear warmup steps.", ge=0)
    min_lr_ratio: float = setting(0.1, help="Cosine decays to lr x this.", ge=0, le=1)
    weight_decay: float = setting(0.01, help="AdamW weight decay.")
    betas: tuple[float, float] = (0.9, 0.999)
    max_grad_norm: float = setting(1.0, help="Gradient clipping.")
    # Sequences as TIGER / LC-Rec: 5-core, chronological leave-one-out, last 20 items.
    k_core: int = setting(
        PROMPT_DEFAULTS["k_core"], help="Keep users/items with >= this many events.", ge=1
    )
    max_history: int = setting(
        PROMPT_DEFAULTS["max_history"], help="Items of history in a prompt.", ge=1
    )
    # Write each history item as "<a_1><b_2><c_3> (title)".
    titles: bool = setting(PROMPT_DEFAULTS["titles"], help="Write titles beside history SIDs.")
    system_prompt: str = setting(PROMPT_DEFAULTS["system_prompt"], help=SYSTEM_PROMPT_HELP)
    max_text_chars: int = 400  # item texts of the alignment tasks are cut here
    # A subset of FREEZABLE; the paper trains everything.
    freeze: tuple[str, ...] = setting(
        (),
        help=f"Freeze a part: {' | '.join(FREEZABLE)} (repeatable).",
        cli_type=list[str] | None,
        cli_default=None,
        parse=lambda parts: tuple(parts or ()),
    )
    seed: int = setting(0, help="Seed of the data order.", tags=(RUNNER,))
    # Resume state every N steps (and on SIGINT/SIGTERM).
    save_every: int = setting(200, help="Save resume state every N steps.", ge=1, tags=(RESUMABLE,))
    # The state after the last step, kept beside the checkpoint: a later run of the same
    # settings with more --steps continues from it instead of re-training from the init
    # (the study grows its plan so; ~3x the weights on disk). The longer run equals one
    # straight run only where the rate does not depend on the length: --min-lr-ratio 1.
    keep_state: bool = setting(
        False,
        help="Keep the resume state after the last step, so a run with more --steps continues.",
        tags=(RESUMABLE,),
    )
    # auto: bf16 autocast where it is fast (CUDA, or a CPU with avx512_bf16 / AMX) and
    # the weights are float32 (float64 runs are equivalence checks); on: always; off: never.
    bf16: str = setting(
        "auto", help="auto | on | off: bf16 autocast (auto: CUDA or a bf16-capable CPU)."
    )
    device: str = setting("auto", help="auto | cpu | cuda.", tags=(RUNNER,))
    # Weights and arithmetic of the run, and of the checkpoint it writes. float64 is for
    # equivalence checks (tests): rounding then stays far below any tolerance that
    # matters, on every CPU kernel, even after AdamW's amplification of tiny gradients.
    dtype: str = dtype_setting()
    arm: str | None = setting(None, tags=(RUNNER,))  # experiment arm, recorded in the provenance
    progress: bool = progress_setting()
    cache_dir: Path | None = cache_dir_setting()

    def validate(self, world_size: int = 1) -> int:
        """Check every field; returns the gradient-accumulation steps per optimizer step."""
        if self.tasks not in TASKS:
            raise InputError("--tasks", f"unknown tasks {self.tasks!r}; choose from {TASKS}")
        if self.objective not in OBJECTIVES:
            raise InputError(
                "--objective", f"unknown objective {self.objective!r}; choose from {OBJECTIVES}"
            )
        if self.objective == "sequence" and self.tasks != "next-item":
            raise InputError("--objective", "sequence trains next-item only; use --tasks next-item")
        if self.bf16 not in BF16_MODES:
            raise InputError("--bf16", f"expected {' | '.join(BF16_MODES)}, got {self.bf16!r}")
        check_bounds(self)
        if self.stride >= self.window:
            raise InputError(
                "--stride",
                f"{self.stride} must be < --window {self.window}: windows must overlap so "
                "each window's first labelled item has context",
            )
        bad = [f for f in self.freeze if f not in FREEZABLE]
        if bad:
            raise InputError("--freeze", f"unknown part {bad[0]!r}; choose from {FREEZABLE}")
        if set(self.freeze) == set(FREEZABLE):
            raise InputError("--freeze", "freezing layers and embeddings leaves nothing to train")
        check_dtype(self.dtype)
        check_device(self.device)
        per_step = self.micro_batch_size * world_size
        if self.batch_size % per_step:
            raise InputError(
                "--batch-size",
                f"{self.batch_size} is not a multiple of --micro-batch-size x processes "
                f"({self.micro_batch_size} x {world_size}); pick sizes that divide",
            )
        return self.batch_size // per_step
