"""configs/*.toml name the shipped presets (gti/presets/) and resolve to what they did
before the presets moved there; `gti init --preset NAME` grounds as the TOML's runner."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from gti.init.config import GroundingConfig, apply_preset, preset_fields
from gti.presets import preset_names, read_preset
from tests.gti.experiment.effective_configs import GOLDEN, effective

ROOT = Path(__file__).parents[3]
CONFIGS = sorted((ROOT / "configs").glob("*.toml"))
# Deliberate changes since the golden file was written, (file, section, key): (old, new).
# None now: the golden was rewritten (effective_configs.py) when issue 49's sequence SFT
# added its fields (objective "example" by default, so every config trains as before; window,
# stride, sequence_prefix, separator) and bf16 became auto | on | off (the presets' `true`
# -> "auto": on where the device has bf16), folding in paper.toml's structure_every 0 -> 500.
# Rewritten again for issue 49's study at a real budget: study-seq.toml (new), gpu-study.toml
# in step with it (sequence objective, epochs 0..8, max_history 20, arms without lcrec), and
# grounding's pause_after (0: never) in every config. Rewritten for issue 48's FSDP2
# grounding: grounding's fsdp (false: the backbone whole on each process) in every config.
# Rewritten for issue 49's grown plans: SFT's keep_state (false) in every config.
CHANGED: dict[tuple[str, str, str], tuple[object, object]] = {}


def test_every_config_names_a_shipped_preset_and_sets_nothing_else():
    assert {p.stem for p in CONFIGS} == set(preset_names())
    for path in CONFIGS:
        lines = [x for x in path.read_text().splitlines() if x and not x.startswith("#")]
        assert lines == [f'preset = "{path.stem}"'], path


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_effective_config_is_unchanged(monkeypatch, path):
    monkeypatch.chdir(ROOT)
    want = json.loads(GOLDEN.read_text())[path.name]
    for (name, section, key), (old, new) in CHANGED.items():
        if name == path.name:
            assert want["config"][section][key] == old
            want["config"][section][key] = new
    assert effective(path.relative_to(ROOT)) == want


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_gti_init_preset_grounds_as_the_runner_does(monkeypatch, path):
    from gti.experiment.config import load_config
    from gti.study.config import load_study_config

    monkeypatch.chdir(ROOT)
    rel = path.relative_to(ROOT)
    study = effective(rel)["entry"] == "study"
    cfg = load_study_config(rel) if study else load_config(rel)
    assert cfg.grounding == dataclasses.replace(GroundingConfig(), **apply_preset(path.stem))


@pytest.mark.parametrize("name", preset_names())
def test_preset_grounding_sets_only_what_flags_can_override(name):
    """defaults < preset < flags holds for `gti init` only if every key a preset grounds
    with is a flag whose command-line default means "the preset's"."""
    assert set(read_preset(name).get("grounding", {})) <= set(preset_fields())
