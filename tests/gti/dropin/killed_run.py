"""``gti ARGS...`` in this process, which SIGKILLs itself right after grounding step K (a
hard kill at a known step: no signal handler runs, nothing is flushed). Usage:
``python killed_run.py K gti-args...``; K 0: never killed."""

from __future__ import annotations

import os
import signal
import sys

import torch

torch.set_num_threads(1)

import gti.dropin.run as dropin_run  # noqa: E402
from gti.cli import app  # noqa: E402

kill_at = int(sys.argv[1])
train_grounding = dropin_run.train_grounding


def killed_after_step_k(*args, **kwargs):
    def should_stop(step: int) -> bool:
        if step == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return False

    return train_grounding(*args, **{**kwargs, "should_stop": should_stop})


dropin_run.train_grounding = killed_after_step_k
app(sys.argv[2:])
