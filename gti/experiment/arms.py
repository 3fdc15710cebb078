"""The arms of the comparison: an init strategy and an SFT task mix each.

``lcrec`` is LC-Rec (mean init, then SFT on next item + text <-> SID alignment);
``gti+lcrec`` puts GTI's grounding before the same mix, the paper's best arm.
``gti-from-description`` grounds from description-mean rows instead of the paper's
mean (``gti init --start-from description-mean``); ``gti-from-codebook-projection`` from
the RQ-VAE code vectors projected into the embedding space (the start that keeps its
structure through grounding at CPU budgets, reports/grounding/budget).
Arms with the same init (strategy and start) share one init checkpoint per seed.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Arm:
    init: str  # a `gti init --strategy`
    tasks: str  # a `gti sft --tasks`
    start_from: str = "mean"  # a `gti init --start-from` (gti only)

    @property
    def init_name(self) -> str:
        """The init's folder and stage name: its strategy, and its start when not the mean."""
        if self.init != "gti" or self.start_from == "mean":
            return self.init
        return f"{self.init}-from-{self.start_from}"


ARMS: dict[str, Arm] = {
    "mean": Arm("mean", "next-item"),
    "mean-noise": Arm("mean-noise", "next-item"),
    "random": Arm("random", "next-item"),
    "description-mean": Arm("description-mean", "next-item"),
    "gti": Arm("gti", "next-item"),
    "lcrec": Arm("mean", "lcrec"),
    "gti+lcrec": Arm("gti", "lcrec"),
    "gti-from-description": Arm("gti", "next-item", "description-mean"),
    "gti-from-codebook-projection": Arm("gti", "next-item", "codebook-projection"),
}
DEFAULT_ARMS = ("mean", "random", "description-mean", "gti", "lcrec", "gti+lcrec")
