"""Configs of ``gti init``. Import-light (no torch) so ``gti --help`` stays fast.

Defaults reproduce the paper's grounding stage (arXiv 2604.02324: AdamW, lr 1e-3,
8,000 steps x batch 128) unless a field says why it differs. The ``[grounding]`` of a
shipped preset (gti.presets: paper, cpu, tiny, ...) sizes the run for the hardware at
hand; explicit ``--steps`` / ``--batch-size`` win (the rule: gti.presets).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from geodiag.errors import InputError
from geodiag.settings import REQUIRED, check_bounds, setting, spec_of
from gti.init import REGISTRY
from gti.init.norm import NORM_CORRECTIONS
from gti.models.smollm2 import NAME as DEFAULT_MODEL
from gti.options import RESUMABLE, RUNNER, cache_dir_setting, check_device, progress_setting

# Row strategies (one function each, gti.init.REGISTRY; its modules import torch only
# when called) plus the grounding stage.
ROW_STRATEGIES = tuple(REGISTRY)
STRATEGIES = (*ROW_STRATEGIES, "gti")

# Optimizers of the new rows (gti.init.optim) and learning-rate decays.
OPTIMIZERS = ("adamw", "lazy-adam", "sgd", "adagrad")
DECAYS = ("none", "cosine")

# Grounding objectives (gti.init.distill): the paper's cross-entropy on text <-> SID
# pairs, token distillation (Dobler et al., ICLR 2026), or both added.
OBJECTIVES = ("ce", "distill", "ce+distill")

# Where grounding's trainable rows live (gti.init.peft_rows): gti's own tensor spliced into
# the frozen model, written back into a full checkpoint; or PEFT's trainable-tokens layer
# (the model wrapped by peft), written as a PEFT adapter over the unchanged base.
VEHICLES = ("rows", "peft")
# Items the drop-in route holds out from grounding by default (--holdout), and what
# `gti probe` samples where a checkpoint records no held-out set.
DROPIN_HOLDOUT = 64
DISTILL_TARGETS = ("hidden", "logits")


@dataclass
class GroundingConfig:
    """The GTI grounding stage: only the new rows train, every other weight frozen.

    Fields with ``help`` are ``gti init`` options (``geodiag.settings``); steps, batch
    size and lr default to the preset on the command line (None there: the preset's).
    A new grounding setting is one field here.
    """

    steps: int = setting(
        8000,
        help="Grounding steps (overrides the preset).",
        cli_type=int | None,
        cli_default=None,
        ge=1,
        tags=(RESUMABLE,),
    )
    batch_size: int = setting(
        128,
        help="Grounding batch size (overrides the preset).",
        cli_type=int | None,
        cli_default=None,
        ge=1,
    )
    lr: float = setting(
        1e-3,
        help="Learning rate (overrides the preset; paper: 1e-3).",
        cli_type=float | None,
        cli_default=None,
        gt=0,
    )
    # Resume state is written every this many steps (and on SIGINT/SIGTERM).
    save_every: int = setting(25, help="Save resume state every N steps.", ge=1, tags=(RESUMABLE,))
    # A run in pieces (a job's time limit, a shared machine): stop after this step with
    # the resume state saved; the same command later goes on. 0: run to the end.
    pause_after: int = setting(
        0, help="Stop after step N with the resume state saved (0: never).", ge=0,
        tags=(RESUMABLE,),
    )  # fmt: skip
    # The paper states no schedule or decay for grounding; embeddings are usually
    # trained without weight decay, and decay would pull the new rows to 0.
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    seed: int = setting(0, tags=(RUNNER,))  # gti init: its --seed
    # Item texts longer than this (characters) are cut: a catalog with long
    # descriptions would otherwise blow up the sequence length; ML-100k texts are < 120.
    max_text_chars: int = 400
    progress: bool = progress_setting()
    # adamw (the paper) moves every new row every step: with a tied head each row gets
    # a tiny gradient through the softmax normaliser at every answer position, and
    # Adam rescales it to a full step. lazy-adam updates only the rows present in the
    # batch; sgd steps in proportion to the gradient (gti.init.optim; what each does:
    # reports/grounding/README.md).
    optimizer: str = setting(
        "adamw",
        help=f"Optimizer of the new rows: {' | '.join(OPTIMIZERS)} (overrides the preset).",
        cli_type=str | None,
        cli_default=None,
    )
    eps: float = setting(1e-8, help="Adam/Adagrad epsilon (a floor under the gradient RMS).", gt=0)
    warmup_steps: int = setting(
        0,
        help="Linear learning-rate warm-up steps (overrides the preset).",
        cli_type=int | None,
        cli_default=None,
        ge=0,
    )
    decay: str = setting(
        "none",
        help=f"Learning-rate decay after warm-up: {' | '.join(DECAYS)} (to 0 at the last step).",
        cli_type=str | None,
        cli_default=None,
    )
    # Per epoch, each item is shown this many times as text -> SID and as SID -> text
    # (paper: once each). A text -> SID example costs ~0.65 of a SID -> text one here.
    text_to_sid_repeats: int = setting(
        1,
        help="text->SID examples per item and epoch (overrides the preset).",
        cli_type=int | None,
        cli_default=None,
        ge=0,
    )
    sid_to_text_repeats: int = setting(
        1,
        help="SID->text examples per item and epoch (overrides the preset).",
        cli_type=int | None,
        cli_default=None,
        ge=0,
    )
    bf16: bool = setting(False, help="bfloat16 autocast for the frozen model's matmuls.")
    # Memory for compute: a long sequence or a big batch on a large backbone. The frozen
    # prefix's cache cannot be replayed, so with it every row runs whole (gti.init.grounding).
    # The same rows either way (to rounding), so a resumed run may switch it.
    gradient_checkpointing: bool = setting(
        False,
        help="Activation checkpointing of the frozen model's layers (less memory, more "
        "compute; rows run without the frozen-prefix cache).",
        tags=(RESUMABLE,),
    )
    # A backbone that does not fit one device (gti.init.sharding): each process keeps about
    # 1/N of every frozen weight; the new rows, their gradient all-reduce and their optimizer
    # are data-parallel grounding's. The same rows either way (to rounding), so a resumed
    # run may switch it.
    fsdp: bool = setting(
        False,
        help="Shard the frozen backbone with FSDP2 over the launched processes (torchrun / "
        "accelerate launch): a backbone that does not fit one device.",
        tags=(RESUMABLE,),
    )
    # The structure curve (gti.init.structure): at step 0, every N steps and at the
    # end, geometry, RSA per level against the codebooks and held-out code accuracy of
    # the live rows, into train_log.jsonl. It changes what is logged, never the rows.
    structure_every: int = setting(
        0,
        help="Log the structure curve every N steps (0: off; overrides the preset).",
        cli_type=int | None,
        cli_default=None,
        ge=0,
        tags=(RESUMABLE,),
    )
    structure_permutations: int = setting(
        200, help="RSA permutations per in-loop measurement.", ge=0, tags=(RESUMABLE,)
    )
    probe_items: int = setting(
        256, help="Items (seeded sample) of the held-out accuracy probe.", ge=1, tags=(RESUMABLE,)
    )

    # Token distillation (gti.init.distill): the frozen model reading an item's text in a
    # context is the teacher; the same context with the item's SID in place of the text is
    # the student; the context after the span is where they are matched.
    objective: str = setting(
        "ce", help=f"Grounding objective: {' | '.join(OBJECTIVES)} (ce: the paper's)."
    )
    distill_target: str = setting(
        "hidden",
        help=f"What distillation matches after the span: {' | '.join(DISTILL_TARGETS)} "
        "(hidden: MSE of the hidden states at --distill-layer; logits: KL of the next-token "
        "distributions over the original vocabulary).",
    )
    # -1: the last layer, after the final norm, as AweDist's default (target_layer=-1): the
    # state the head reads, so matching it matches everything downstream of the span.
    distill_layer: int = setting(
        -1,
        help="Hidden state matched by --distill-target hidden: 1..L (after decoder layer k; "
        "L: after the final norm), -1: the last.",
        ge=-1,
    )
    distill_weight: float = setting(
        1.0, help="Weight of the distillation loss (the loss is ce + weight x distill).", ge=0
    )

    @property
    def uses_ce(self) -> bool:
        return self.objective in ("ce", "ce+distill")

    @property
    def uses_distill(self) -> bool:
        return self.objective in ("distill", "ce+distill")

    def validate(self) -> None:
        check_bounds(self)
        if self.objective not in OBJECTIVES:
            raise InputError(
                "--objective",
                f"unknown objective {self.objective!r}; choose from {', '.join(OBJECTIVES)}",
            )
        if self.distill_target not in DISTILL_TARGETS:
            raise InputError(
                "--distill-target",
                f"expected {' or '.join(DISTILL_TARGETS)}, got {self.distill_target!r}",
            )
        if self.distill_layer == 0:
            raise InputError(
                "--distill-layer",
                "layer 0 is the input embeddings: after the span they do not depend on the "
                "new rows; pick 1..L or -1 (the last)",
            )
        if self.optimizer not in OPTIMIZERS:
            raise InputError(
                "--optimizer",
                f"unknown optimizer {self.optimizer!r}; choose from {', '.join(OPTIMIZERS)}",
            )
        if self.decay not in DECAYS:
            raise InputError("--decay", f"expected {' or '.join(DECAYS)}, got {self.decay!r}")
        if self.text_to_sid_repeats + self.sid_to_text_repeats < 1:
            raise InputError("--text-to-sid-repeats", "an epoch needs at least one example")


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
        Path("runs/ml100k/sids"),
        help="Folder written by `gti sids build`, or a framework's SID map file (with --items).",
        flags=("--sids",),
    )
    # The drop-in route (gti.dropin): a framework's own SID map and item texts.
    items: Path | None = setting(
        None,
        help="Item texts of a framework's SID map: LC-Rec {dataset}.item.json, OpenOneRec "
        "pid2caption.parquet, semantic-ids-llm items parquet, or JSON lines {item, text}.",
    )
    text_fields: str | None = setting(
        None,
        help="Comma-separated fields of --items that make an item's text (default: per format).",
    )
    codebooks: Path | None = setting(
        None, help="The framework's codebooks (with --items): RSA and `geodiag check` use them."
    )
    templates: Path | None = setting(
        None,
        help="With --items: grounding's prompt templates, a TOML file as the shipped "
        "gti/presets/prompts/default.toml (the default).",
    )
    sid_offset: int | None = setting(
        None,
        help="With --items: what --sids' codes start from, when the data cannot tell (0 or 1).",
    )
    adapter: bool = setting(
        False,
        help="With --items: write a PEFT adapter (trainable_token_indices) instead of a model.",
    )
    # Items kept out of grounding (and of the text-reading inits) for the held-out probe
    # (`gti probe`); at most a tenth of the items with text. None: DROPIN_HOLDOUT on the
    # drop-in route; none on gti's own SIDs, whose study grounds every item (the rows of
    # its committed runs stay as they were).
    holdout: int | None = setting(
        None,
        help=f"Items held out from grounding for the probe (default: {DROPIN_HOLDOUT} with "
        "--items, 0 on gti's own SIDs).",
        ge=0,
    )
    # More items without text than this share is bad input (exit 2); fewer are named.
    max_missing_texts: float = setting(
        0.05, help="With --items: the largest share of items without text that is accepted.", ge=0
    )
    strategy: str = setting("gti", help=f"New-row initialization: {' | '.join(STRATEGIES)}.")
    # OneRec-Think grounds its item tokens with PEFT's trainable tokens; teams who train with
    # PEFT want an adapter. The same loop, data, loss and schedule either way (the rows are
    # the same numbers: PEFT's "delta" holds the rows' values, not an offset).
    vehicle: str = setting(
        "rows",
        help=f"Where gti grounding trains the new rows: {' | '.join(VEHICLES)} (rows: a full "
        "checkpoint; peft: PEFT's trainable tokens, written as a PEFT adapter over --model).",
    )
    # Where GTI's grounding starts; the paper starts from the mean (Hewitt) init.
    start_from: str = setting(
        "mean",
        help=f"Row init that gti grounding starts from (paper: mean): {' | '.join(ROW_STRATEGIES)}.",
    )
    descriptions: Path | None = setting(
        None,
        help="With llamafactory-desc(-noise): a YAML or JSON file {token: description}, as "
        "LLaMA-Factory's new_special_tokens_config; tokens it leaves out are described by "
        "their items' texts.",
    )
    # NVIDIA Nemotron's tokenizer extension rescales its new rows to the median row norm;
    # applied after the strategy (for gti: to the start rows), per matrix.
    norm_correct: str = setting(
        "none",
        help="Rescale each new row to the vocabulary's median row norm: "
        f"{' | '.join(NORM_CORRECTIONS)}.",
    )
    # Training frameworks pad the vocabulary to a multiple of 64 or 256 rows (tensor-core
    # shapes). The padding rows are zero and are not new tokens (gti.vocab).
    pad_vocab_to_multiple_of: int = setting(
        0,
        help="Pad the embedding to a multiple of N rows; the padding rows are zero and not "
        "new tokens (0: exactly the tokenizer's length).",
        ge=0,
    )
    # None: what the sids folder was built with (its provenance), so the new
    # tokens land in the same backbone and pair with the same item texts.
    model: str | None = setting(
        None, help=f"{DEFAULT_MODEL} | tiny | a local HF folder (default: the sids' model)."
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

    def held_out_count(self) -> int:
        """Items to hold out (``--holdout``, or the route's default)."""
        if self.holdout is not None:
            return self.holdout
        return DROPIN_HOLDOUT if self.items is not None else 0

    def validate(self) -> None:
        check_bounds(self)
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
        if self.norm_correct not in NORM_CORRECTIONS:
            raise InputError(
                "--norm-correct",
                f"unknown rule {self.norm_correct!r}; choose from {', '.join(NORM_CORRECTIONS)}",
            )
        check_device(self.device)
        self.check_vehicle()
        if self.strategy == "gti":
            self.grounding.validate()
        if self.grounding.fsdp:
            self.check_fsdp()

    def check_fsdp(self) -> None:
        """What ``--fsdp`` cannot go with (the number of processes is checked at launch)."""
        if self.strategy != "gti":
            raise InputError(
                "--fsdp",
                f"it shards the backbone for grounding; --strategy {self.strategy} trains "
                "nothing (use --strategy gti, or leave --fsdp out)",
            )
        if self.items is not None:
            raise InputError(
                "--fsdp", "the drop-in route (--items) runs on one process; leave --fsdp out"
            )

    def check_vehicle(self) -> None:
        """``--vehicle peft`` trains PEFT's trainable tokens and writes an adapter over the
        unchanged base: what it cannot do is bad input, named here."""
        if self.vehicle not in VEHICLES:
            raise InputError(
                "--vehicle",
                f"unknown vehicle {self.vehicle!r}; choose from {', '.join(VEHICLES)}",
            )
        if self.vehicle == "rows":
            return
        if self.strategy != "gti":
            raise InputError(
                "--vehicle",
                f"peft trains the new rows in grounding; --strategy {self.strategy} trains "
                "nothing (with --items, --adapter writes its rows as a PEFT adapter)",
            )
        if self.items is not None:
            raise InputError(
                "--vehicle",
                "peft runs on gti's own SIDs for now, not on the drop-in route (--items); there "
                "--adapter writes the grounded rows as a PEFT adapter (trainable tokens + a "
                "zero LoRA), the same rows --vehicle peft trains",
            )
        if self.adapter:
            raise InputError(
                "--vehicle",
                "peft writes its own trainable-tokens adapter; --adapter writes a LoRA + "
                "trainable-tokens adapter of rows trained by --vehicle rows: pick one",
            )
        if self.pad_vocab_to_multiple_of:
            raise InputError(
                "--vehicle",
                "peft writes only the new rows over the unchanged base; the padding rows of "
                "--pad-vocab-to-multiple-of would be in neither (pad when you resize the base "
                "for training, or use --vehicle rows)",
            )


def preset_fields() -> tuple[str, ...]:
    """GroundingConfig fields whose command-line default is None, meaning "the
    preset's" (or the field's default where the preset leaves it out)."""
    return tuple(
        f.name for f in dataclasses.fields(GroundingConfig) if spec_of(f).cli_default is None
    )


def apply_preset(preset: str, **explicit: object) -> dict[str, object]:
    """The ``[grounding]`` of shipped preset ``preset`` (gti.presets), over
    GroundingConfig's defaults for the fields it leaves out, the non-None ``explicit``
    values winning: defaults < preset < flags."""
    from gti.presets import grounding_preset

    defaults = GroundingConfig()
    values = {k: getattr(defaults, k) for k in preset_fields()}
    given = {k: v for k, v in explicit.items() if v is not None}
    return {**values, **grounding_preset(preset), **given}


def describe_preset(values: dict[str, object]) -> str:
    """``360x8@0.02 adamw`` for help texts and logs."""
    text = f"{values['steps']}x{values['batch_size']}@{values['lr']:g}"
    return text + (f" {values['optimizer']}" if "optimizer" in values else "")
