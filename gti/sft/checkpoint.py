"""What ``gti sft`` writes: the contract checkpoint (stage ``sft``) and its resume state.

Checkpoint folder = ``save_pretrained`` of model and tokenizer, plus
``semantic_ids.json`` (provenance updated to stage ``sft``), ``codebooks.safetensors``
(copied from the init checkpoint), ``sft_config.json`` and ``train_log.jsonl``.
Written by ``gti.checkpoint_files.write_checkpoint``, atomically.

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

from gti.checkpoint_files import SFT_CONFIG_FILENAME
from gti.training import ResumeStore

CONFIG_FILENAME = SFT_CONFIG_FILENAME
TRAINER_STATE = "trainer_state.json"


class SFTState(ResumeStore):
    """``<out>.partial/state``: accelerate state + trainer_state.json, swapped in atomically."""

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
        self.check(state.get("fingerprint"), folder)
        with quiet("accelerate"):
            accelerator.load_state(str(folder))
        return int(state["step"]), list(state["log"])


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
