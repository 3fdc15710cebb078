"""What ``gti init`` writes: the contract checkpoint (DESIGN.md), atomically, and the
resumable state of a grounding run in progress.

Checkpoint folder = ``save_pretrained`` of model and tokenizer, plus
``semantic_ids.json`` (token ids and provenance filled in), ``codebooks.safetensors``
(copied from the sids folder), ``init_config.json`` (the resolved run config) and,
for ``gti``, ``train_log.jsonl`` (one line per grounding step). It is built in a
sibling staging folder and renamed into place: a reader never sees half of one.

Resume state = ``<out>.partial/state.pt``: the new rows, AdamW state, step, torch
RNG state, the loss log so far, and a fingerprint of the settings that must not
change between a run and its resumption. The data position is ``step`` itself
(``pairs.PairStream`` is a pure function of seed and example index).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from geodiag.errors import InputError
from geodiag.sidecar import CODEBOOKS_FILENAME, SemanticIds, save
from geodiag.sidecar import FILENAME as SIDECAR_FILENAME
from gti.cache import staging_dir

CONFIG_FILENAME = "init_config.json"
TRAIN_LOG_FILENAME = "train_log.jsonl"
STATE_FILENAME = "state.pt"
# Our own files in every checkpoint; the rest is what save_pretrained writes.
OWN_FILES = (SIDECAR_FILENAME, CODEBOOKS_FILENAME, CONFIG_FILENAME)


def partial_dir(out: Path) -> Path:
    return out.parent / f"{out.name}.partial"


def check_output_dir(out: Path) -> None:
    """Refuse to replace anything but a previous checkpoint of ``gti init``."""
    if out.exists() and not out.is_dir():
        raise InputError("-o", f"{out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / CONFIG_FILENAME).is_file():
        raise InputError(
            "-o", f"{out} is not empty and holds no {CONFIG_FILENAME}; choose a new or empty folder"
        )


def write_checkpoint(
    out: Path,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sids: SemanticIds,
    codebooks: Path,
    run_config: dict[str, object],
    train_log: list[dict[str, object]] | None = None,
) -> Path:
    """Write the whole checkpoint into a staging folder, then rename it to ``out``."""
    with staging_dir(out) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        save(sids, tmp / SIDECAR_FILENAME)
        shutil.copyfile(codebooks, tmp / CODEBOOKS_FILENAME)
        (tmp / CONFIG_FILENAME).write_text(json.dumps(run_config, indent=1, allow_nan=False))
        if train_log is not None:
            lines = (json.dumps(e, allow_nan=False) for e in train_log)
            (tmp / TRAIN_LOG_FILENAME).write_text("".join(line + "\n" for line in lines))
    return out


class ResumeStore:
    """``<out>.partial/state.pt``: saved atomically, checked against a fingerprint."""

    def __init__(self, folder: Path, fingerprint: dict[str, object]) -> None:
        self.folder = folder
        self.path = folder / STATE_FILENAME
        self.fingerprint = fingerprint

    def save(
        self,
        step: int,
        rows: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        log: list[dict[str, object]],
    ) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        state = {
            "fingerprint": self.fingerprint,
            "step": step,
            "rows": {k: v.detach().cpu() for k, v in rows.state_dict().items()},
            "optimizer": optimizer.state_dict(),
            "rng": torch.get_rng_state(),
            "log": log,
        }
        tmp = self.path.with_suffix(".tmp")
        torch.save(state, tmp)
        os.replace(tmp, self.path)  # a kill mid-save leaves the previous state intact

    def load(
        self, rows: torch.nn.Module, optimizer: torch.optim.Optimizer
    ) -> tuple[int, list[dict[str, object]]] | None:
        """Restore rows, optimizer and RNG; returns (step, log), or None if no state."""
        if not self.path.is_file():
            return None
        try:
            state = torch.load(self.path, map_location="cpu", weights_only=True)
        except Exception as e:  # a truncated or foreign file
            raise InputError(
                self.path, f"unreadable resume state ({type(e).__name__}); delete {self.folder}"
            ) from None
        if state.get("fingerprint") != self.fingerprint:
            changed = sorted(
                k
                for k in set(self.fingerprint) | set(state.get("fingerprint", {}))
                if self.fingerprint.get(k) != state.get("fingerprint", {}).get(k)
            )
            raise InputError(
                self.path,
                f"a run with other settings ({', '.join(changed)}) left this state; rerun with "
                f"the same flags to resume it, or delete {self.folder} to start over",
            )
        device = next(rows.parameters()).device
        rows.load_state_dict({k: v.to(device) for k, v in state["rows"].items()})
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"])
        return int(state["step"]), list(state["log"])

    def clear(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
