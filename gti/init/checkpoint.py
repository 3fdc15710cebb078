"""What ``gti init`` writes: the contract checkpoint (DESIGN.md), atomically, and the
resumable state of a grounding run in progress.

Checkpoint folder = ``save_pretrained`` of model and tokenizer, plus
``semantic_ids.json`` (token ids and provenance filled in), ``codebooks.safetensors``
(copied from the sids folder), ``init_config.json`` (the resolved run config) and,
for ``gti``, ``train_log.jsonl`` (one line per grounding step); written by
``gti.checkpoint_files.write_checkpoint``, atomically.

Resume state = ``<out>.partial/state.pt``: the new rows, AdamW state, step, torch
RNG state, the loss log so far, and a fingerprint of the settings that must not
change between a run and its resumption. The data position is ``step`` itself
(``pairs.PairStream`` is a pure function of seed and example index).
"""

from __future__ import annotations

from pathlib import Path

import torch

from geodiag.atomic import atomic_path
from geodiag.errors import InputError
from gti.checkpoint_files import INIT_CONFIG_FILENAME
from gti.training import ResumeStore

CONFIG_FILENAME = INIT_CONFIG_FILENAME
STATE_FILENAME = "state.pt"


class GroundingState(ResumeStore):
    """``<out>.partial/state.pt``: saved atomically, checked against a fingerprint."""

    def __init__(self, folder: Path, fingerprint: dict[str, object]) -> None:
        super().__init__(folder, fingerprint)
        self.path = folder / STATE_FILENAME

    def save(
        self,
        step: int,
        rows: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        log: list[dict[str, object]],
    ) -> None:
        state = {
            "fingerprint": self.fingerprint,
            "step": step,
            "rows": {k: v.detach().cpu() for k, v in rows.state_dict().items()},
            "optimizer": optimizer.state_dict(),
            "rng": torch.get_rng_state(),
            "log": log,
        }
        with atomic_path(self.path) as tmp:  # a kill mid-save leaves the previous state
            torch.save(state, tmp)

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
        self.check(state.get("fingerprint"), self.path)
        device = next(rows.parameters()).device
        rows.load_state_dict({k: v.to(device) for k, v in state["rows"].items()})
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"])
        return int(state["step"]), list(state["log"])
