"""The study presets load and say what the issue asks; bad keys name the file."""

from __future__ import annotations

from dataclasses import replace
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


def test_gpu_study_is_the_cpu_sequence_study_at_a_larger_budget():
    """scripts/gpu-study.sh keeps in step with the CPU study: the same objective, windows,
    rate and schedule, arms, evaluation and SIDs; it differs in batch, bf16, seeds and
    how many epochs."""
    gpu = load_study_config(CONFIGS / "gpu-study.toml")
    cpu = load_study_config(CONFIGS / "study-seq.toml")
    assert gpu.device == "cuda" and gpu.sft.bf16 == "auto" and gpu.seeds == (0,)
    # the same SIDs; the GPU embeds the catalog in larger batches
    assert gpu.arms == cpu.arms
    assert replace(gpu.sids, embed_batch_size=cpu.sids.embed_batch_size) == cpu.sids
    same = ("objective", "window", "stride", "lr", "warmup_steps", "min_lr_ratio", "max_history",
            "k_core", "sequence_prefix", "separator", "titles")  # fmt: skip
    assert {k: getattr(gpu.sft, k) for k in same} == {k: getattr(cpu.sft, k) for k in same}
    assert gpu.evaluate.beams == cpu.evaluate.beams and gpu.evaluate.max_users is None
    assert gpu.epochs[: len(cpu.epochs)] == cpu.epochs and max(gpu.epochs) > max(cpu.epochs)


def test_sequence_study_preset():
    cfg = load_study_config(CONFIGS / "study-seq.toml")
    assert cfg.sft.objective == "sequence" and cfg.epochs == (0.0, 0.25, 0.5, 1.0, 2.0)
    assert cfg.sft.min_lr_ratio == 1.0  # a constant rate: a longer run only adds steps
    assert cfg.sft.bf16 == "off"  # one computation on every machine a run's pieces see
    # issue 49's four arms and issue 48's fifth; the GPU study runs the same arms
    assert cfg.arms == ("mean", "gti", "random", "description-mean", "gti-from-codebook-projection")
    assert load_study_config(CONFIGS / "gpu-study.toml").arms == cfg.arms
    assert len(cfg.seeds) >= 3 and cfg.evaluate.max_users is None
    assert cfg.sft.micro_batch_size > 1  # batched, never a micro-batch of one


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
