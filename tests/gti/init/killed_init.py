"""``gti ARGS...`` as one process of a launched run, whose process of rank R SIGKILLs itself
right after grounding step K (a hard kill at a known step: no signal handler runs, nothing
is flushed; the launcher then tears down the others). Usage: ``torchrun ... killed_init.py R
K gti-args...``."""

from __future__ import annotations

import os
import signal
import sys

import torch

torch.set_num_threads(1)

import gti.init.run as init_run  # noqa: E402
from gti.cli import app  # noqa: E402

kill_rank, kill_at = int(sys.argv[1]), int(sys.argv[2])
ground = init_run.ground


def killed_after_step_k(*args, **kwargs):
    outer = kwargs.get("should_stop")

    def should_stop(step: int) -> bool:
        if step == kill_at and int(os.environ.get("RANK", "0")) == kill_rank:
            os.kill(os.getpid(), signal.SIGKILL)
        return outer(step) if outer is not None else False

    return ground(*args, **{**kwargs, "should_stop": should_stop})


init_run.ground = killed_after_step_k
app(sys.argv[3:])
