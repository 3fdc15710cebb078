"""``gti init``: a thin typer command; register it with ``app.command("init")(init)``.

Its options are the fields of :class:`~gti.init.config.InitConfig` and
:class:`~gti.init.config.GroundingConfig` (``geodiag.settings``), plus ``--preset``.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Annotated

import typer

from geodiag.settings import options_from
from gti.dropin.files import CHECKS_TEXT_FILENAME
from gti.errors import exits_on_bad_input
from gti.init.config import (
    GroundingConfig,
    InitConfig,
    apply_preset,
    describe_preset,
    preset_fields,
)
from gti.presets import preset_names

log = logging.getLogger(__name__)


def _brief(name: str) -> str:
    values = apply_preset(name)
    return describe_preset({k: values[k] for k in ("steps", "batch_size", "lr")})


@exits_on_bad_input
@options_from("cfg", InitConfig)
@options_from("grounding", GroundingConfig)
def init(
    cfg: InitConfig = InitConfig(),
    preset: Annotated[
        str,
        typer.Option(
            help="Grounding settings of a shipped preset (`gti presets ls`), steps x batch @ lr: "
            + ", ".join(f"{n}={_brief(n)}" for n in preset_names())
            + "; auto = paper on CUDA, cpu otherwise. Flags go over it."
        ),
    ] = "auto",
    grounding: GroundingConfig = GroundingConfig(),
) -> None:
    """Add one token per SID code to the backbone and initialize the new rows.

    Writes a checkpoint (HF folder + semantic_ids.json + codebooks.safetensors +
    init_config.json, and train_log.jsonl for gti). An interrupted gti run resumes
    when the same command is run again.
    """
    from gti.init.run import run_init

    if not grounding.progress:  # transformers' own bars (loading, writing shards) too
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    if preset == "auto":
        import torch

        preset = "paper" if torch.cuda.is_available() and cfg.device != "cpu" else "cpu"
    values = apply_preset(preset, **{k: getattr(grounding, k) for k in preset_fields()})
    cfg.grounding = replace(grounding, **values, seed=cfg.seed)
    if cfg.strategy == "gti":
        log.info("grounding: preset %s, %s", preset, describe_preset(values))
    if cfg.items is not None:  # a framework's own SID map and item texts: gti.dropin
        from gti.dropin.run import run_dropin

        out = run_dropin(cfg)
    else:
        out = run_init(cfg)
    from gti.init.parallel import main_process

    if not main_process():  # under torchrun / accelerate launch: rank 0 reports
        return
    checks = out / CHECKS_TEXT_FILENAME  # the drop-in route's probe and geodiag check
    if checks.is_file():
        typer.echo(checks.read_text(), nl=False)
    typer.echo(str(out))
