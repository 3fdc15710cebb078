"""Which training stack wrote a checkpoint, from the files it leaves behind.

The verdict names the option that produced a collapse and the alternative *in the
stack the user runs*; this module only collects the evidence (no imports of those
stacks, nothing read but small text files):

- ``gti``: a ``semantic_ids.json`` whose provenance names an ``init_strategy``;
- ``peft``: an adapter folder read over its base (the init happened before PEFT);
- ``unsloth``: ``config.json`` carries ``unsloth_version`` (Unsloth writes it);
- ``llamafactory``: ``trainer_log.jsonl`` or ``llamaboard_config.yaml`` (LLaMA-Factory's
  log callback and web UI write them); ``init_special_tokens`` from ``training_args.yaml``
  when present;
- ``transformers``: ``trainer_state.json`` (a ``Trainer`` checkpoint) and nothing above;
- ``unknown``: none of these.
"""

from __future__ import annotations

import re
from pathlib import Path


def _yaml_scalar(path: Path, key: str) -> str | None:
    """``key: value`` from a flat YAML file, without a YAML parser (one line, no nesting)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    m = re.search(rf"^{re.escape(key)}:\s*['\"]?([^'\"\s#]+)", text, re.MULTILINE)
    return m.group(1) if m else None


def detect_stack(
    roots: list[Path], config: dict, provenance: dict | None, adapter: dict | None
) -> dict:
    """{"name", "evidence", ...options found} for the folders ``roots`` (checkpoint first)."""

    def find(name: str) -> Path | None:
        return next((r / name for r in roots if (r / name).is_file()), None)

    if provenance and (provenance.get("init_strategy") or provenance.get("init")):
        return {"name": "gti", "evidence": "semantic_ids.json provenance"}
    if adapter:
        return {"name": "peft", "evidence": f"{adapter.get('peft_type')} adapter folder"}
    if config.get("unsloth_version"):
        return {
            "name": "unsloth",
            "evidence": f"config.json unsloth_version {config['unsloth_version']}",
        }
    for marker in ("trainer_log.jsonl", "llamaboard_config.yaml"):
        if (found := find(marker)) is not None:
            out = {"name": "llamafactory", "evidence": found.name}
            args = find("training_args.yaml")
            if args is not None:
                for key in ("init_special_tokens", "resize_vocab", "new_special_tokens_config"):
                    if (value := _yaml_scalar(args, key)) is not None:
                        out[key] = value
            return out
    if find("trainer_state.json") is not None:
        return {"name": "transformers", "evidence": "trainer_state.json"}
    return {"name": "unknown", "evidence": "no sidecar, adapter or trainer files"}
