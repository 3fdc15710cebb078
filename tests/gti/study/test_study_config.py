"""The study presets load and say what the issue asks; bad keys name the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from geodiag.errors import InputError
from gti.study.config import load_study_config

CONFIGS = Path(__file__).parents[3] / "configs"


def test_cpu_study_preset():
    cfg = load_study_config(CONFIGS / "study.toml")
    assert set(cfg.arms) >= {"mean", "gti", "random", "description-mean"} and len(cfg.seeds) >= 3
    assert cfg.milestones() == [0, 26, 64, 128, 256]
    assert [r for r in cfg.ordered_runs()][:6] == [("mean", s) for s in cfg.seeds] + [
        ("gti", s) for s in cfg.seeds
    ]
    assert cfg.evaluate.max_users is None  # every validation and test user


def test_gpu_study_preset_is_paper_batch_bf16_all_arms_one_seed():
    cfg = load_study_config(CONFIGS / "gpu-study.toml")
    assert cfg.device == "cuda" and cfg.sft.bf16 == "auto" and cfg.seeds == (0,)
    assert cfg.grounding.batch_size == 128 and cfg.sft.batch_size == 128
    assert {"mean", "gti", "random", "description-mean"} <= set(cfg.arms)
    assert cfg.sids.model == "smollm2-135m"


def test_cost_probe_differs_from_the_study_only_in_scale():
    study = load_study_config(CONFIGS / "study.toml")
    cost = load_study_config(CONFIGS / "study-cost.toml")
    assert cost.sft.max_history == study.sft.max_history
    assert cost.sft.micro_batch_size == study.sft.micro_batch_size
    assert (cost.sft.batch_size, cost.sft.lr) == (study.sft.batch_size, study.sft.lr)
    assert cost.evaluate.beams == study.evaluate.beams


def test_unknown_and_runner_keys_are_refused(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('[sft]\nout = "x"\n')
    with pytest.raises(InputError, match=r"\[sft\] 'out' is set by the runner"):
        load_study_config(path)
    path.write_text("colour = 1\n")
    with pytest.raises(InputError, match="'colour' is not a known key"):
        load_study_config(path)
