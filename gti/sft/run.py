"""``run_sft``: the library entry behind ``gti sft``.

init checkpoint (contract folder) -> sequences of the SIDs' dataset -> example
stream -> train (accelerate: one process, or DDP under ``accelerate launch`` /
``torchrun``) -> contract checkpoint with stage ``sft``, written atomically by
the main process.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from geodiag.errors import InputError
from geodiag.io.vocabulary.sidecar import CODEBOOKS_FILENAME, SemanticIds, load, with_init
from geodiag.io.vocabulary.sidecar import FILENAME as SIDECAR_FILENAME
from gti.checkpoint_files import check_output_dir, partial_dir, write_checkpoint
from gti.data.tasks import TaskData, dataset_of, load_task_data
from gti.errors import Interrupted
from gti.options import fingerprinted, recorded
from gti.sft.checkpoint import CONFIG_FILENAME, SFTState
from gti.sft.config import BF16_MODES, SFTConfig
from gti.sft.data import SFTStream
from gti.sft.sequence import SequenceStream
from gti.sft.trainer import train_sft
from gti.training import resolve_device

log = logging.getLogger(__name__)


def cpu_has_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether the CPU computes bf16 natively (avx512_bf16 or AMX): elsewhere bf16
    matmuls are emulated, slower than float32."""
    try:
        flags = set(cpuinfo.read_text().split())
    except OSError:  # not Linux: no way to tell, so no autocast
        return False
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def use_bf16(cfg: SFTConfig, device: torch.device) -> bool:
    """--bf16 resolved: ``auto`` autocasts float32 weights where bf16 is native."""
    if cfg.bf16 not in BF16_MODES:
        raise InputError("--bf16", f"expected {' | '.join(BF16_MODES)}, got {cfg.bf16!r}")
    if cfg.bf16 != "auto":
        return cfg.bf16 == "on"
    if cfg.dtype != "float32":  # float64: an equivalence check; bfloat16: already there
        return False
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return cpu_has_bf16()


def make_accelerator(cfg: SFTConfig) -> Accelerator:
    """bf16 on CUDA through accelerate's mixed precision. On CPU the trainer autocasts
    itself (:func:`cpu_autocast`): accelerate's state is one per process and refuses a
    second mixed-precision setting, which runs of both kinds in one process would need."""
    device = resolve_device(cfg.device)
    cuda_bf16 = device.type == "cuda" and use_bf16(cfg, device)
    return Accelerator(cpu=device.type == "cpu", mixed_precision="bf16" if cuda_bf16 else "no")


def cpu_autocast(cfg: SFTConfig, accelerator: Accelerator) -> bool:
    """Whether the trainer runs its CPU forward passes under bf16 autocast."""
    return accelerator.device.type == "cpu" and use_bf16(cfg, accelerator.device)


def load_checkpoint(
    path: Path, dtype: torch.dtype = torch.float32
) -> tuple[PreTrainedModel, object, SemanticIds]:
    """Model (in ``dtype``), tokenizer and sidecar of a contract checkpoint; checks they agree."""
    sids = load(path)
    if not sids.has_token_ids:
        raise InputError(
            path / SIDECAR_FILENAME, "records no token ids; pass a checkpoint written by `gti init`"
        )
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    ids = [t for lv in sids.levels for t in lv.token_ids]
    if tokenizer.convert_tokens_to_ids(sids.token_strings()) != ids:
        raise InputError(path, "the tokenizer's SID token ids differ from semantic_ids.json")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True)
    if model.get_input_embeddings().weight.shape[0] <= max(ids):
        raise InputError(path, "the embedding has fewer rows than the SID token ids need")
    return model, tokenizer, sids


def make_stream(
    cfg: SFTConfig, tokenizer: PreTrainedTokenizerBase, task: TaskData
) -> SFTStream | SequenceStream:
    """The training examples of ``cfg.objective``: prompts, or packed history windows."""
    if cfg.objective == "sequence":
        return SequenceStream(
            tokenizer,
            task,
            window=cfg.window,
            stride=cfg.stride,
            prefix=cfg.sequence_prefix,
            separator=cfg.separator,
            seed=cfg.seed,
        )
    return SFTStream(
        tokenizer,
        task,
        tasks=cfg.tasks,
        align_ratio=cfg.align_ratio,
        titles=cfg.titles,
        system=cfg.system_prompt,
        seed=cfg.seed,
        max_text_chars=cfg.max_text_chars,
    )


def apply_freeze(model: PreTrainedModel, parts: tuple[str, ...]) -> None:
    """Freeze ``layers`` (every decoder parameter but the embedding) and/or ``embeddings``
    (input embedding and output head)."""
    embed = {id(model.get_input_embeddings().weight)}
    head = model.get_output_embeddings()
    if head is not None:
        embed.add(id(head.weight))
    for p in model.parameters():
        is_embed = id(p) in embed
        if ("embeddings" in parts and is_embed) or ("layers" in parts and not is_embed):
            p.requires_grad_(False)


def run_sft(cfg: SFTConfig, *, should_stop: Callable[[int], bool] | None = None) -> Path:
    """Fine-tune ``cfg.init`` and write the stage-``sft`` checkpoint to ``cfg.out``.

    Raises :class:`gti.errors.Interrupted` when training stopped early (signal or
    ``should_stop``); the same call later resumes where it stopped.
    """
    accelerator = make_accelerator(cfg)
    cfg.validate(accelerator.num_processes)
    cpu_bf16 = cpu_autocast(cfg, accelerator)
    out, init = Path(cfg.out), Path(cfg.init)
    check_output_dir(out, CONFIG_FILENAME)
    set_seed(cfg.seed)
    model, tokenizer, sids = load_checkpoint(init, getattr(torch, cfg.dtype))
    data = dataset_of(sids, cfg.data, init)
    task = load_task_data(
        sids, data, k_core_min=cfg.k_core, max_history=cfg.max_history, cache_dir=cfg.cache_dir
    )
    stream = make_stream(cfg, tokenizer, task)
    apply_freeze(model, cfg.freeze)

    run_config: dict[str, object] = {
        **{k: str(v) if isinstance(v, Path) else v for k, v in recorded(cfg).items()},
        "data": data,
        "processes": accelerator.num_processes,
        "mixed_precision": accelerator.mixed_precision,
        "cpu_bf16_autocast": cpu_bf16,
        "train_examples": len(task.splits.train),
        "examples_per_epoch": stream.epoch_size,
        # Counted for the packed route only: the prompts' count would render them all.
        "tokens_per_epoch": (
            stream.tokens_per_epoch() if isinstance(stream, SequenceStream) else None
        ),
        "init_provenance": sids.provenance,
    }
    # Fields a resumed run must share (gti.options), plus what they resolved to.
    same = fingerprinted(SFTConfig) | {
        "mixed_precision",
        "cpu_bf16_autocast",
        "train_examples",
        "examples_per_epoch",
    }
    fingerprint = {k: v for k, v in run_config.items() if k in same}
    fingerprint["init_sha256"] = hashlib.sha256((init / SIDECAR_FILENAME).read_bytes()).hexdigest()
    resume = SFTState(partial_dir(out), fingerprint)
    result, loss_fn = train_sft(
        model,
        stream,
        cfg,
        accelerator,
        resume=resume,
        should_stop=should_stop,
        cpu_bf16=cpu_bf16,
    )
    if not result.completed:
        raise Interrupted(result.step, str(resume.folder))

    state_dict = accelerator.get_state_dict(loss_fn)  # gathered (FSDP), prefixed "model."
    if accelerator.is_main_process:
        trained = accelerator.unwrap_model(loss_fn).model
        state_dict = {k.removeprefix("model."): v for k, v in state_dict.items()}
        codebooks = init / CODEBOOKS_FILENAME
        write_checkpoint(
            out,
            trained,
            tokenizer,
            sft_sidecar(sids, cfg, result.step, data, out),
            codebooks if codebooks.is_file() else None,
            CONFIG_FILENAME,
            run_config,
            result.log,
            state_dict=state_dict,
        )
        if not cfg.keep_state:
            resume.clear()
        log.info("wrote %s (%s, %d steps)", out, cfg.tasks, result.step)
    accelerator.wait_for_everyone()
    return out


def sft_sidecar(sids: SemanticIds, cfg: SFTConfig, step: int, data: str, out: Path) -> SemanticIds:
    """The init checkpoint's sidecar with provenance moved to stage ``sft``; the init's
    provenance is kept whole under ``init``, and the init checkpoint is named relative to
    ``out`` (geodiag measures the new rows' movement from it)."""
    prov = dict(sids.provenance)
    sft = SemanticIds(
        base_vocab_size=sids.base_vocab_size,
        levels=sids.levels,
        items=sids.items,
        provenance={
            **{k: v for k, v in prov.items() if k not in ("stage", "step", "seed")},
            "stage": "sft",
            "step": step,
            "seed": cfg.seed,
            "init_strategy": prov.get("init_strategy"),
            "arm": cfg.arm,
            "sft_tasks": cfg.tasks,
            "data": data,
            "init": prov,
        },
    )
    return with_init(sft, cfg.init, out)
