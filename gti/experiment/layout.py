"""One (arm, seed) run of ``gti experiment`` or ``gti study``: the names of the files
the runners write (``Files``, read back by ``gti.study.assemble`` and the geometry
intervals), its folders (one paths object, one layout function per runner) and the
configs of its init and SFT stages (one builder, shared by both runners)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from gti.checkpoint_files import TRAIN_LOG_FILENAME
from gti.evaluate.config import EvalConfig
from gti.evaluate.rankings import rankings_file
from gti.experiment.arms import ARMS
from gti.init.config import GroundingConfig, InitConfig
from gti.semantic_ids.config import SidsConfig
from gti.sft.config import SFTConfig


class Files:
    """The file and folder names of a run, each written once: the runners write them,
    ``gti.study.assemble`` and ``gti.study.geometry_intervals`` read them back."""

    # gti experiment's output folder
    CONFIG = "experiment.json"  # the resolved config; a re-run must match it
    SIDS = "sids"  # the SIDs folder, built once for every arm (also in the study's work)
    EVAL = "eval"  # seed-S/eval/<arm>.json
    # both runners (the experiment's output folder, a study run's report folder)
    TIMINGS = "timings.jsonl"  # one line per stage run: name, seconds, when it finished
    REPORT = "report.html"  # the geodiag report (its JSON beside it)
    # the tables: the experiment's output folder, the study's reports folder
    RESULTS_JSON = "results.json"
    RESULTS_MD = "results.md"
    # a study run's report folder, <reports>/runs/<arm>-seed<k>/
    RUN = "run.json"  # settings, milestones, machine, status
    GEOMETRY = "geometry.json"  # {step: geodiag figures}
    TRAIN_LOG = TRAIN_LOG_FILENAME  # the SFT log, copied from the final checkpoint
    CURVE = "curve"  # per-user lists at each milestone (curve_file)
    FINAL = "final"  # per-user lists of the final splits (final_file)
    # the study's reports folder
    RUNS = "runs"
    BASELINES = "baselines"  # <baseline>/<split>.rankings.json (gti baselines)
    GEOMETRY_INTERVALS = "geometry_intervals.json"  # gti study geometry-intervals


def curve_file(step: int, split: str) -> str:
    """A study run's per-user lists of ``split`` after ``step`` SFT steps, relative to
    its report folder."""
    return f"{Files.CURVE}/step-{step:06d}.{rankings_file(split)}"


def final_file(split: str) -> str:
    """A study run's per-user lists of a final split, relative to its report folder."""
    return f"{Files.FINAL}/{rankings_file(split)}"


def run_name(arm: str, seed: int) -> str:
    return f"{arm}-seed{seed}"


def study_runs(reports: Path) -> Path:
    """The folder of the study's per-run report folders, ``<reports>/runs``."""
    return Path(reports) / Files.RUNS


@dataclass(frozen=True)
class RunPaths:
    """Where one (arm, seed) reads and writes. ``init`` is shared by the arms with the same
    init (``Arm.init_name``); ``result`` is the experiment's evaluation JSON or the
    study's report folder."""

    init: Path
    sft: Path
    result: Path

    def milestone(self, step: int) -> Path:
        """The study's checkpoint after ``step`` SFT steps (deleted once measured)."""
        return self.sft.parent / f"step-{step}"


def experiment_paths(out: Path, arm: str, seed: int) -> RunPaths:
    """``out/seed-S/{init/<init name>, sft/<arm>, eval/<arm>.json}`` (gti.experiment.runner)."""
    root = Path(out) / f"seed-{seed}"
    return RunPaths(
        init=root / "init" / ARMS[arm].init_name,
        sft=root / "sft" / arm,
        result=root / Files.EVAL / f"{arm}.json",
    )


def study_paths(work: Path, reports: Path, arm: str, seed: int) -> RunPaths:
    """``<work>/init/<init name>-seed<k>``, ``<work>/<arm>-seed<k>/sft`` and the report
    folder ``<reports>/runs/<arm>-seed<k>`` (gti.study.run)."""
    name = run_name(arm, seed)
    return RunPaths(
        init=Path(work) / "init" / f"{ARMS[arm].init_name}-seed{seed}",
        sft=Path(work) / name / "sft",
        result=study_runs(reports) / name,
    )


class RunnerConfig(Protocol):
    """What both runners' configs (ExperimentConfig, StudyConfig) hold for the stages."""

    device: str
    sids: SidsConfig
    grounding: GroundingConfig
    sft: SFTConfig
    evaluate: EvalConfig
    cache_dir: Path | None
    progress: bool


def arm_stages(
    cfg: RunnerConfig, arm: str, seed: int, paths: RunPaths, sids: Path
) -> tuple[InitConfig, SFTConfig]:
    """The init and SFT configs of ``arm`` at ``seed``: the runner's stage sections plus
    what the runner sets (paths, seed, the arm's strategy, start and tasks, device)."""
    spec = ARMS[arm]
    init = InitConfig(
        sids=sids,
        out=paths.init,
        strategy=spec.init,
        start_from=spec.start_from,
        seed=seed,
        grounding=replace(cfg.grounding, seed=seed, progress=cfg.progress),
        cache_dir=cfg.cache_dir,
        allow_download=cfg.sids.allow_download,  # the same backbone as the SIDs
        device=cfg.device,
    )
    sft = replace(
        cfg.sft,
        init=paths.init,
        out=paths.sft,
        seed=seed,
        tasks=spec.tasks,
        arm=arm,
        device=cfg.device,
        cache_dir=cfg.cache_dir,
        progress=cfg.progress,
    )
    return init, sft
