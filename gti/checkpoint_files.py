"""The checkpoint folder that ``gti init`` and ``gti sft`` both write (DESIGN.md).

``save_pretrained`` of model and tokenizer, plus ``semantic_ids.json``,
``codebooks.safetensors``, the stage's run config (``init_config.json`` or
``sft_config.json``, which also marks a folder as a previous run's output) and
``train_log.jsonl``. Built in a sibling staging folder and renamed into place
(``geodiag.atomic.atomic_dir``): a reader never sees half of one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from geodiag.atomic import atomic_dir
from geodiag.errors import InputError
from geodiag.io.vocabulary.sidecar import SemanticIds, write_description

if TYPE_CHECKING:  # the output-folder rule is read by gti sids build, without transformers
    from transformers import PreTrainedTokenizerBase

TRAIN_LOG_FILENAME = "train_log.jsonl"
INIT_CONFIG_FILENAME = "init_config.json"  # the run config of `gti init`
SFT_CONFIG_FILENAME = "sft_config.json"  # the run config of `gti sft` (evaluation reads it)


def partial_dir(out: Path) -> Path:
    """Where a run that will write ``out`` keeps its resume state."""
    return out.parent / f"{out.name}.partial"


def check_output_dir(out: Path, marker: str, *, only: tuple[str, ...] | None = None) -> None:
    """The one rule for a stage's output folder (``gti sids build``, ``gti init``, ``gti
    sft``), which the stage replaces as a whole: ``out`` must be new, empty, or a previous
    output of the same stage, that is hold the stage's ``marker`` file and, for a stage
    whose files are a fixed list (``only``), nothing else. Anything else is refused, so a
    wrong ``-o`` never deletes a user's files."""
    if out.exists() and not out.is_dir():
        raise InputError("-o", f"{out} exists and is not a folder")
    if not out.is_dir() or not any(out.iterdir()):
        return
    foreign = [] if only is None else sorted(p.name for p in out.iterdir() if p.name not in only)
    if foreign:
        raise InputError(
            "-o",
            f"{out} holds other files ({', '.join(foreign[:3])}); choose a new or empty folder",
        )
    if not (out / marker).is_file():
        raise InputError(
            "-o", f"{out} is not empty and holds no {marker}; choose a new or empty folder"
        )


def write_checkpoint(
    out: Path,
    model: object,
    tokenizer: PreTrainedTokenizerBase,
    sids: SemanticIds,
    codebooks: Path | None,
    config_filename: str,
    run_config: dict[str, object],
    train_log: list[dict[str, object]] | None,
    state_dict: dict | None = None,
    save_weights: Callable[[Path], None] | None = None,
) -> Path:
    """Write the whole checkpoint into a staging folder, then rename it to ``out``.

    ``codebooks`` None: no codebooks file; ``train_log`` None: no train log;
    ``state_dict``: the weights to save instead of the model's own (gathered FSDP);
    ``save_weights``: what writes the weights instead of ``model.save_pretrained`` (a PEFT
    adapter: gti.init.peft_rows).
    """
    with atomic_dir(out) as tmp:
        if save_weights is not None:
            save_weights(tmp)
        else:
            model.save_pretrained(tmp, state_dict=state_dict, safe_serialization=True)  # type: ignore[attr-defined]
        tokenizer.save_pretrained(tmp)
        write_description(tmp, sids, codebooks)
        (tmp / config_filename).write_text(json.dumps(run_config, indent=1, allow_nan=False))
        if train_log is not None:
            lines = (json.dumps(e, allow_nan=False) for e in train_log)
            (tmp / TRAIN_LOG_FILENAME).write_text("".join(line + "\n" for line in lines))
    return out
