"""The loop pieces grounding and SFT share (gti.training): the scheduled learning rate
set on every group, where a loop resumes, when it saves, when it stops."""

from __future__ import annotations

import os
import signal
from types import SimpleNamespace

import pytest
import torch

from gti.init.config import GroundingConfig
from gti.sft.config import SFTConfig
from gti.training import StopOnSignal, get_lr, resume_point, save_due, set_lr


def two_group_optimizer() -> torch.optim.Optimizer:
    a, b = torch.nn.Parameter(torch.zeros(2, 2)), torch.nn.Parameter(torch.zeros(2))
    return torch.optim.AdamW([{"params": [a]}, {"params": [b], "weight_decay": 0.0}], lr=9.0)


def test_set_lr_is_get_lr_of_the_configs_schedule_on_every_group():
    sft = SFTConfig(steps=11, lr=1.0, warmup_steps=2, min_lr_ratio=0.1)
    opt = two_group_optimizer()
    got = set_lr(opt, 6, sft, min_lr_ratio=sft.min_lr_ratio)
    assert got == pytest.approx(0.55)  # halfway through the cosine: (1 + 0.1) / 2
    assert got == get_lr(6, lr=1.0, warmup_steps=2, total_steps=11, min_lr_ratio=0.1)
    assert [g["lr"] for g in opt.param_groups] == [got, got]

    grounding = GroundingConfig(steps=5, lr=2.0, warmup_steps=1, decay="cosine")
    lrs = [set_lr(opt, s, grounding, decay=grounding.decay) for s in range(5)]
    assert lrs == pytest.approx([2.0, 2.0, 1.5, 0.5, 0.0])


def test_resume_point_starts_fresh_resumes_or_refuses_a_longer_run():
    assert resume_point(None, 5) == (0, [])
    log = [{"step": 1}, {"step": 2}, {"step": 3}]
    assert resume_point((3, log), 5) == (3, log)
    assert resume_point((5, log), 5) == (5, log)  # done: the loop runs no step
    with pytest.raises(ValueError, match="step 6, past --steps 5"):
        resume_point((6, log), 5)


def test_save_due_every_save_every_steps_and_on_a_stop_but_never_after_the_last():
    cfg = SimpleNamespace(steps=10, save_every=4)
    assert [s for s in range(1, 11) if save_due(s, cfg, halt=False)] == [4, 8]
    assert [s for s in range(1, 11) if save_due(s, cfg, halt=True)] == list(range(1, 10))


def test_stop_at_a_signal_or_when_should_stop_says_so():
    stop = StopOnSignal()
    assert not stop.stop_at(1, None)
    assert [s for s in range(1, 5) if stop.stop_at(s, lambda s: s == 2)] == [2]
    with StopOnSignal() as signals:
        os.kill(os.getpid(), signal.SIGTERM)
        assert signals.requested and signals.stop_at(1, None)
    assert signal.getsignal(signal.SIGTERM) != signals._handle  # restored on exit
