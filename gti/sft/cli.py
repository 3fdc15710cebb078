"""``gti sft``: a thin typer command; register it with ``app.command("sft")(sft)``.

Its options are the fields of :class:`~gti.sft.config.SFTConfig` (``geodiag.settings``).
"""

from __future__ import annotations

import typer

from geodiag.settings import options_from
from gti.errors import exits_on_bad_input
from gti.sft.config import SFTConfig


@exits_on_bad_input
@options_from("cfg", SFTConfig)
def sft(cfg: SFTConfig = SFTConfig()) -> None:
    """Fine-tune an initialized checkpoint for next-item generation (all parameters).

    Writes a checkpoint with stage "sft" (HF folder + semantic_ids.json +
    codebooks.safetensors + sft_config.json + train_log.jsonl). An interrupted run
    resumes when the same command is run again. Multi-GPU: `accelerate launch -m
    gti.cli sft ...` or `torchrun --nproc_per_node N -m gti.cli sft ...`.
    """
    from gti.sft.run import run_sft

    path = run_sft(cfg)
    from gti.init.parallel import main_process

    if main_process():  # under torchrun/accelerate: print once
        typer.echo(str(path))
