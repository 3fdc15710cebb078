"""``run_probe``: the library entry behind ``gti probe``.

checkpoint -> its index, item texts and held-out items (``gti.probe.source``) -> the model
and tokenizer, the index's tokens checked against them -> the figures
(``gti.probe.measure``) -> ``-o FILE`` and ``--write`` (``probe.json`` beside the weights).
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from geodiag.atomic import atomic_write
from geodiag.errors import InputError
from geodiag.jsonio import dumps
from geodiag.outputs.report.probe import PROBE_FILENAME
from gti.probe.config import ProbeConfig
from gti.probe.measure import ProbeResult, probe_model
from gti.probe.source import check_tokens, resolve_source
from gti.training import resolve_device

log = logging.getLogger(__name__)


def load_checkpoint(ckpt: Path, dtype: str, device: str):
    """(model, tokenizer) of a checkpoint folder, offline."""
    if (ckpt / "adapter_config.json").is_file():
        raise InputError(
            "CKPT",
            f"{ckpt} is a PEFT adapter; merge it into its base model first "
            "(peft's merge_and_unload) and probe the merged folder",
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(ckpt, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(
            ckpt, dtype=getattr(torch, dtype), local_files_only=True
        )
    except (OSError, ValueError) as e:
        raise InputError("CKPT", f"{ckpt}: cannot load a causal LM from it ({e})") from None
    return model.to(resolve_device(device)).eval(), tokenizer


def run_probe(cfg: ProbeConfig) -> ProbeResult:
    """The probe's figures for ``cfg.checkpoint``, written where ``cfg`` asks."""
    cfg.validate()
    ckpt = Path(cfg.checkpoint)
    src = resolve_source(cfg)
    model, tokenizer = load_checkpoint(ckpt, cfg.dtype, cfg.device)
    check_tokens(src.index, tokenizer, model.get_input_embeddings().weight.shape[0], ckpt)
    log.info("probing %s on %d items", ckpt, len(src.items))
    result = probe_model(
        model,
        tokenizer,
        src,
        checkpoint=str(ckpt),
        seed=cfg.seed,
        batch_size=cfg.batch_size,
        n_resamples=cfg.n_resamples,
    )
    text = dumps(result) + "\n"
    if cfg.out is not None:
        atomic_write(Path(cfg.out), text)
    if cfg.write:
        atomic_write(ckpt / PROBE_FILENAME, text)
    return result
