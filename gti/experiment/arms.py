"""The arms of the comparison: an init strategy and an SFT task mix each.

``lcrec`` is LC-Rec (mean init, then SFT on next item + text <-> SID alignment);
``gti+lcrec`` puts GTI's grounding before the same mix, the paper's best arm.
Arms with the same init share one init checkpoint per seed.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Arm:
    init: str  # a `gti init --strategy`
    tasks: str  # a `gti sft --tasks`


ARMS: dict[str, Arm] = {
    "mean": Arm("mean", "next-item"),
    "mean-noise": Arm("mean-noise", "next-item"),
    "random": Arm("random", "next-item"),
    "description-mean": Arm("description-mean", "next-item"),
    "gti": Arm("gti", "next-item"),
    "lcrec": Arm("mean", "lcrec"),
    "gti+lcrec": Arm("gti", "lcrec"),
}
DEFAULT_ARMS = ("mean", "random", "description-mean", "gti", "lcrec", "gti+lcrec")
