"""Config of ``gti study``: the learning-curve study, read from TOML into typed configs.

Top-level keys: ``name``, ``work`` (weights, resume states: never committed),
``reports`` (the small committed outputs), ``sids_from`` (a built SID folder to copy;
else ``[sids]`` builds one), ``seeds``, ``arms``, ``fractions`` (of the SFT steps at
which a checkpoint is measured; 0 is the init), ``device``, ``threads``,
``epochs`` (milestones in epochs instead of fractions), ``permutations`` (RSA), ``curve_split``, ``final_splits``, ``report_html``.
Sections as in ``gti experiment``: ``[sids]`` (+ ``[sids.rqvae]``), ``[grounding]``,
``[sft]``, ``[evaluate]``, with the same keys the runner sets refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from geodiag.analysis.options import AnalyzeOptions
from geodiag.errors import InputError
from geodiag.settings import default_of
from gti.evaluate.config import SPLITS, EvalConfig
from gti.experiment.arms import ARMS
from gti.experiment.config import STAGE_SECTIONS, fill_section, read_config, stage_configs
from gti.init.config import GroundingConfig
from gti.semantic_ids.config import SidsConfig
from gti.sft.config import SFTConfig

# The four arms of the issue; ``lcrec`` and ``gti+lcrec`` may be added.
STUDY_ARMS = ("mean", "gti", "random", "description-mean")
# Run order: mean and gti first across seeds (the headline comparison), then the rest.
FIRST_ARMS = ("mean", "gti")


@dataclass
class StudyConfig:
    name: str = "study"
    work: Path = Path("runs/study")
    reports: Path = Path("reports/study")
    sids_from: Path | None = None
    seeds: tuple[int, ...] = (0, 1, 2)
    arms: tuple[str, ...] = STUDY_ARMS
    fractions: tuple[float, ...] = (0.0, 0.1, 0.25, 0.5, 1.0)
    # Milestones in epochs of the SFT stream instead (0 = the init). When given, the SFT
    # steps and the fractions follow from the stream's epoch size at run time
    # (:meth:`resolve_epochs`): steps = max(epochs) x examples per epoch / batch size.
    epochs: tuple[float, ...] = ()
    curve_split: str = "valid"  # measured at every fraction
    final_splits: tuple[str, ...] = ("test",)  # measured at the last fraction only
    device: str = "auto"
    # torch intra-op threads (0: torch's default). 1 on the shared 2-core machine.
    threads: int = 1
    # RSA permutations per level and checkpoint, as geodiag's default.
    permutations: int = default_of(AnalyzeOptions, "n_permutations")
    report_html: bool = True  # geodiag report (init vs final) per run, committed
    sids: SidsConfig = field(default_factory=SidsConfig)
    grounding: GroundingConfig = field(default_factory=GroundingConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    evaluate: EvalConfig = field(default_factory=EvalConfig)
    cache_dir: Path | None = None
    progress: bool = True
    source: str = "<defaults>"

    def milestones(self) -> list[int]:
        """SFT steps at which the run is measured, ascending, without repeats."""
        return sorted({round(f * self.sft.steps) for f in self.fractions})

    def resolve_epochs(self, epoch_size: int) -> float:
        """Set the SFT steps and the fractions from ``epochs`` and the stream's
        ``epoch_size`` (examples per epoch); returns steps per epoch."""
        per_epoch = epoch_size / self.sft.batch_size
        steps = [round(e * per_epoch) for e in self.epochs]
        if steps[-1] < 1:
            raise InputError(self.source, f"epochs {list(self.epochs)} are under one SFT step")
        if len(set(steps)) != len(steps):
            raise InputError(
                self.source, f"epochs {list(self.epochs)} round to repeated SFT steps {steps}"
            )
        self.sft.steps = steps[-1]
        self.fractions = tuple(s / steps[-1] for s in steps)
        return per_epoch

    def ordered_runs(self) -> list[tuple[str, int]]:
        """(arm, seed) in run order: the first arms over every seed, then the others."""
        first = [a for a in FIRST_ARMS if a in self.arms]
        rest = [a for a in self.arms if a not in first]
        return [(a, s) for a in first for s in self.seeds] + [
            (a, s) for s in self.seeds for a in rest
        ]

    def validate(self) -> None:
        where = self.source
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise InputError(where, f"seeds must be non-empty without repeats: {self.seeds}")
        bad = [a for a in self.arms if a not in ARMS]
        if bad or not self.arms or len(set(self.arms)) != len(self.arms):
            raise InputError(where, f"arms must be distinct names from {', '.join(ARMS)}")
        if self.epochs:
            pass  # the fractions follow from the epochs (resolve_epochs)
        elif not self.fractions or any(not 0 <= f <= 1 for f in self.fractions):
            raise InputError(where, f"fractions must lie in [0, 1], got {list(self.fractions)}")
        elif max(self.fractions) != 1:
            raise InputError(where, "fractions must include 1 (the final budget)")
        if self.epochs and (list(self.epochs) != sorted(set(self.epochs)) or self.epochs[0] < 0):
            raise InputError(where, f"epochs must ascend without repeats from >= 0: {self.epochs}")
        if self.curve_split not in SPLITS or any(s not in SPLITS for s in self.final_splits):
            raise InputError(where, f"splits must be from {SPLITS}")
        if self.threads < 0 or self.permutations < 0:
            raise InputError(where, "threads and permutations must be >= 0")
        self.sids.validate()
        self.grounding.validate()
        self.sft.validate()
        self.evaluate.validate()


def load_study_config(path: Path) -> StudyConfig:
    data = read_config(path)
    where = str(path)
    top = {k: v for k, v in data.items() if k not in STAGE_SECTIONS}
    forbidden = (*STAGE_SECTIONS, "source", "cache_dir", "progress")
    cfg = fill_section(StudyConfig, top, where, "top level", forbidden)
    cfg.sids, cfg.grounding, cfg.sft, cfg.evaluate = stage_configs(
        data,
        where,
        evaluate_forbidden=("splits", "k_core", "max_history", "titles", "system_prompt", "exact"),
    )
    cfg.source = where
    cfg.validate()
    return cfg
