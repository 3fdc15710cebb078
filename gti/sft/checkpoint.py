"""What ``gti sft`` writes: the contract checkpoint (stage ``sft``) and its resume state.

Checkpoint folder = ``save_pretrained`` of model and tokenizer, plus
``semantic_ids.json`` (provenance updated to stage ``sft``), ``codebooks.safetensors``
(copied from the init checkpoint), ``sft_config.json`` and ``train_log.jsonl``.
Built in a sibling staging folder and renamed into place (``gti.cache.staging_dir``).

Resume state = ``<out>.partial/state/``: ``accelerator.save_state`` (model,
optimizer and every process's RNG, in whatever layout DDP/FSDP/DeepSpeed need)
plus ``trainer_state.json`` (step, loss log, and a fingerprint of the settings a
resumed run must share). A new state is written beside the old one and swapped
in, so a kill during a save leaves the previous state usable.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from accelerate import Accelerator
from transformers import PreTrainedTokenizerBase

from geodiag.errors import InputError
from geodiag.sidecar import CODEBOOKS_FILENAME, SemanticIds, save
from geodiag.sidecar import FILENAME as SIDECAR_FILENAME
from gti.cache import staging_dir

CONFIG_FILENAME = "sft_config.json"
TRAIN_LOG_FILENAME = "train_log.jsonl"
TRAINER_STATE = "trainer_state.json"


def partial_dir(out: Path) -> Path:
    return out.parent / f"{out.name}.partial"


def check_output_dir(out: Path) -> None:
    """Refuse to replace anything but a previous checkpoint of ``gti sft``."""
    if out.exists() and not out.is_dir():
        raise InputError("-o", f"{out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / CONFIG_FILENAME).is_file():
        raise InputError(
            "-o", f"{out} is not empty and holds no {CONFIG_FILENAME}; choose a new or empty folder"
        )


def write_checkpoint(
    out: Path,
    model: object,
    state_dict: dict,
    tokenizer: PreTrainedTokenizerBase,
    sids: SemanticIds,
    codebooks: Path,
    run_config: dict[str, object],
    train_log: list[dict[str, object]],
) -> Path:
    """Write the whole checkpoint into a staging folder, then rename it to ``out``."""
    with staging_dir(out) as tmp:
        model.save_pretrained(tmp, state_dict=state_dict, safe_serialization=True)  # type: ignore[attr-defined]
        tokenizer.save_pretrained(tmp)
        save(sids, tmp / SIDECAR_FILENAME)
        if codebooks.is_file():
            shutil.copyfile(codebooks, tmp / CODEBOOKS_FILENAME)
        (tmp / CONFIG_FILENAME).write_text(json.dumps(run_config, indent=1, allow_nan=False))
        lines = (json.dumps(e, allow_nan=False) for e in train_log)
        (tmp / TRAIN_LOG_FILENAME).write_text("".join(line + "\n" for line in lines))
    return out


class ResumeStore:
    """``<out>.partial/state``: accelerate state + trainer_state.json, swapped in atomically."""

    def __init__(self, folder: Path, fingerprint: dict[str, object]) -> None:
        self.folder = folder
        # As it reads back from JSON (tuples become lists), so the two compare equal.
        self.fingerprint = json.loads(json.dumps(fingerprint, allow_nan=False))

    @property
    def _state(self) -> Path:
        return self.folder / "state"

    def save(self, accelerator: Accelerator, step: int, log: list[dict[str, object]]) -> None:
        tmp, old = self.folder / "state.tmp", self.folder / "state.old"
        if accelerator.is_main_process:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        accelerator.wait_for_everyone()
        with quiet("accelerate"):
            accelerator.save_state(str(tmp))
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            state = {"fingerprint": self.fingerprint, "step": step, "log": log}
            (tmp / TRAINER_STATE).write_text(json.dumps(state, allow_nan=False))
            shutil.rmtree(old, ignore_errors=True)
            if self._state.exists():
                self._state.rename(old)
            tmp.rename(self._state)
            shutil.rmtree(old, ignore_errors=True)
        accelerator.wait_for_everyone()

    def load(self, accelerator: Accelerator) -> tuple[int, list[dict[str, object]]] | None:
        """Restore model, optimizer and RNG into the prepared objects; (step, log) or None."""
        folder = next(
            (f for f in (self._state, self.folder / "state.old") if (f / TRAINER_STATE).is_file()),
            None,
        )
        if folder is None:
            return None
        state = json.loads((folder / TRAINER_STATE).read_text())
        saved = state.get("fingerprint", {})
        if saved != self.fingerprint:
            changed = sorted(
                k
                for k in set(saved) | set(self.fingerprint)
                if saved.get(k) != self.fingerprint.get(k)
            )
            raise InputError(
                folder,
                f"a run with other settings ({', '.join(changed)}) left this state; rerun with "
                f"the same flags to resume it, or delete {self.folder} to start over",
            )
        with quiet("accelerate"):
            accelerator.load_state(str(folder))
        return int(state["step"]), list(state["log"])

    def clear(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


@contextmanager
def quiet(logger_name: str) -> Iterator[None]:
    """Silence a library's per-save INFO lines (and its expected tied-weights warning)."""
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
