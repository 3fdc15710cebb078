"""What the stage configs share: the roles a field can have beyond being a
command-line flag (``geodiag.settings`` tags), and the checks of the settings
several stages take (device, dtype). Import-light: no torch.

Roles are declared once per field; the stage runs, the resume fingerprints and
``gti experiment`` read them from there:

- ``RUNNER``: set by ``gti experiment`` for each stage (a TOML value is refused).
- ``UI``: how a run shows progress or where its caches live; never recorded in a run's
  config, never part of a resume fingerprint, never pinned by experiment.json.
- ``PATH``: a stage's input or output folder; ``gti experiment`` lays these out
  itself, so experiment.json does not pin them.
- ``RESUMABLE``: may differ between a run and its resumption (more steps, another
  save interval, another split of the batch): not part of the resume fingerprint.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from geodiag.errors import InputError
from geodiag.settings import setting, spec_of

RUNNER = "runner"
UI = "ui"
PATH = "path"
RESUMABLE = "resumable"

DTYPES = ("float32", "float64")

# Sequences as TIGER / LC-Rec: 5-core, chronological leave-one-out, last 20 items,
# history written as SIDs only. SFT's defaults, and evaluation's when a checkpoint
# does not record its own.
# The system turn as the chat template writes it when none is given (SmolLM2's default).
TEMPLATE_SYSTEM = "template"
PROMPT_DEFAULTS: dict[str, object] = {
    "k_core": 5,
    "max_history": 20,
    "titles": False,
    "system_prompt": TEMPLATE_SYSTEM,
}
SYSTEM_PROMPT_HELP = (
    "System turn of every prompt: 'template' (the chat template's default), '' (an empty "
    "system turn: 16 fewer tokens per example with SmolLM2), or the text to send."
)
CACHE_HELP = "Cache root (default: $GTI_CACHE or ~/.cache/gti)."


def cache_dir_setting() -> Any:
    """``--cache-dir``, as every stage that reads the cache takes it."""
    return setting(None, help=CACHE_HELP, flags=("--cache-dir",), tags=(RUNNER, UI))


def progress_setting(help: str = "Show a progress bar.") -> Any:
    return setting(True, help=help, tags=(RUNNER, UI))


def dtype_setting() -> Any:
    """Weights and arithmetic of a run; float64 for equivalence checks (tests)."""
    return setting(
        "float32", help="float32 | float64 (weights and arithmetic; float64 for checks)."
    )


def check_dtype(dtype: str) -> None:
    if dtype not in DTYPES:
        raise InputError("--dtype", f"expected {' or '.join(DTYPES)}, got {dtype!r}")


def check_device(device: str) -> None:
    if device not in ("auto", "cpu", "cuda") and not device.startswith("cuda:"):
        raise InputError("--device", f"expected auto, cpu or cuda[:N], got {device!r}")


def recorded(cfg: object) -> dict[str, object]:
    """The fields of a run's config that describe what it computes (all but ``UI``)."""
    return {
        f.name: getattr(cfg, f.name)
        for f in dataclasses.fields(cfg)  # type: ignore[arg-type]
        if UI not in spec_of(f).tags
    }


def fingerprinted(cls: type) -> set[str]:
    """Names of the fields a resumed run must share with the run that saved the state."""
    return {f.name for f in dataclasses.fields(cls) if not spec_of(f).tags & {UI, RESUMABLE}}
