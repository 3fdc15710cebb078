"""The committed pieces of a study, read into typed objects: each complete run's
``run.json`` (:class:`Run`, which also opens its rankings, geometry and train log) and
each baseline's per-user lists. Nothing is computed here (``collect`` does)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from geodiag.errors import InputError
from geodiag.jsonio import read_json
from gti.evaluate.config import SPLITS
from gti.evaluate.rankings import Rankings, load_rankings, rankings_file
from gti.experiment.layout import Files, curve_file, final_file, study_runs


@dataclass(frozen=True)
class Run:
    """One complete (arm, seed) run: its ``run.json`` (``gti.study.run.write_run_json``)
    and the folder its other files are in."""

    arm: str
    seed: int
    folder: Path
    milestones: list[int]  # SFT steps measured so far (all planned ones when complete)
    examples_per_step: int
    curve_split: str
    final_splits: list[str]
    stage_seconds: dict[str, float]
    command: str
    machine: dict[str, object]
    tokens_per_example: dict[str, float] | None = None
    sft_examples_per_s: float | None = None  # run.json's figure (wall time of the stages)
    steps_per_epoch: float | None = None  # a study with milestones in epochs
    complete: bool = True  # False: a run still training, its measured milestones only
    planned: list[int] = field(default_factory=list)  # every milestone of the run

    def epochs(self, step: int) -> float | None:
        """Epochs of the SFT stream after ``step`` steps (None: milestones in fractions)."""
        return None if self.steps_per_epoch is None else round(step / self.steps_per_epoch, 3)

    @classmethod
    def from_json(cls, doc: dict, folder: Path) -> Run:
        complete = doc.get("status") == "complete"
        return cls(
            arm=doc["arm"],
            seed=doc["seed"],
            folder=folder,
            milestones=doc["milestones"] if complete else doc["measured"],
            examples_per_step=doc["examples_per_step"],
            curve_split=doc["curve_split"],
            final_splits=doc["final_splits"] if complete else [],
            stage_seconds=doc["stage_seconds"],
            command=doc["command"],
            machine=doc["machine"],
            tokens_per_example=doc.get("tokens_per_example"),
            sft_examples_per_s=doc.get("sft_examples_per_s"),
            steps_per_epoch=doc.get("steps_per_epoch"),
            complete=complete,
            planned=doc["milestones"],
        )

    def curve(self, step: int) -> Rankings:
        """The curve split's per-user lists after ``step`` SFT steps."""
        return load_rankings(self.folder / curve_file(step, self.curve_split))

    def final(self, split: str) -> Rankings:
        return load_rankings(self.folder / final_file(split))

    def final_at(self, step: int, split: str) -> Rankings | None:
        """The final split ``split``'s lists after ``step`` SFT steps: the run's final when
        it is complete there, else the lists it kept when a grown plan moved that final on
        (``curve/step-<n>.<split>.rankings.json``); None when it has neither."""
        if self.complete and self.milestones[-1] == step and split in self.final_splits:
            return self.final(split)
        kept = self.folder / curve_file(step, split)
        return load_rankings(kept) if split != self.curve_split and kept.is_file() else None

    def geometry(self) -> dict[str, dict]:
        """``geometry.json``: {step (a string): geodiag's figures at that milestone}."""
        return json.loads((self.folder / Files.GEOMETRY).read_text())

    def examples_per_s(self) -> float | None:
        """SFT examples per second of training steps, from the committed train log (each
        step once; see ``gti.study.run.sft_step_seconds``), else run.json's figure."""
        from gti.study.run import sft_step_seconds

        if not self.complete:
            return None
        steps = self.milestones[-1]
        step_s = sft_step_seconds(self.folder / Files.TRAIN_LOG, steps)
        if step_s:
            return round(steps * self.examples_per_step / step_s, 4)
        return self.sft_examples_per_s


@dataclass(frozen=True)
class StudyInputs:
    """What ``collect`` reads: the complete runs by arm and the baselines' lists."""

    root: Path
    runs: dict[str, list[Run]]  # arm -> its runs (complete or in progress), by seed
    baselines: dict[str, dict[str, Rankings]] = field(default_factory=dict)  # name -> split


def read_runs(root: Path) -> dict[str, list[Run]]:
    """arm -> the runs under ``<root>/runs/*/run.json``, sorted by seed: complete ones, and
    runs still training with the milestones they have measured (status "in progress",
    written after each milestone); a run with nothing measured yet is left out."""
    arms: dict[str, list[Run]] = {}
    for path in sorted(study_runs(root).glob(f"*/{Files.RUN}")):
        doc = read_json(path)
        if doc.get("status") not in ("complete", "in progress"):
            continue
        run = Run.from_json(doc, path.parent)
        if run.milestones:
            arms.setdefault(doc["arm"], []).append(run)
    return {a: sorted(v, key=lambda r: r.seed) for a, v in arms.items()}


def read_baselines(root: Path) -> dict[str, dict[str, Rankings]]:
    """baseline -> split -> its per-user lists, from ``<root>/baselines/<name>/``
    (``gti baselines``); a folder with no lists is left out."""
    out: dict[str, dict[str, Rankings]] = {}
    for folder in sorted((Path(root) / Files.BASELINES).glob("*/")):
        lists = {
            split: load_rankings(folder / rankings_file(split))
            for split in SPLITS
            if (folder / rankings_file(split)).is_file()
        }
        if lists:
            out[folder.name] = lists
    return out


def read_inputs(root: Path) -> StudyInputs:
    root = Path(root)
    runs = read_runs(root)
    if not runs and not (root / Files.BASELINES).is_dir():
        raise InputError(root, "holds neither measured runs (runs/*/run.json) nor baselines/")
    return StudyInputs(root, runs, read_baselines(root))
