"""``gti experiment CONFIG.toml``: what to run, read from TOML into typed configs.

Top-level keys: ``name``, ``out``, ``seeds``, ``arms``, ``sft_arms``, ``device``,
``threads``.
Sections map one to one onto the configs of the stages, with the same key names
as their CLI flags (underscores): ``[sids]`` (+ ``[sids.rqvae]``) ->
:class:`~gti.semantic_ids.config.SidsConfig`, ``[grounding]`` ->
:class:`~gti.init.config.GroundingConfig`, ``[sft]`` -> :class:`~gti.sft.config.SFTConfig`,
``[evaluate]`` -> :class:`~gti.evaluate.config.EvalConfig`, ``[report]`` ->
:class:`ReportSection`. Keys the runner sets itself per stage (paths, seeds, the
arm's tasks) are refused, as are unknown keys, naming the file and section.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from geodiag.analysis.options import AnalyzeOptions
from geodiag.errors import InputError
from geodiag.settings import default_of, from_table, tagged
from gti.evaluate.config import EvalConfig
from gti.experiment.arms import ARMS, DEFAULT_ARMS
from gti.init.config import GroundingConfig
from gti.options import RUNNER
from gti.semantic_ids.config import RQVAEConfig, SidsConfig
from gti.sft.config import SFTConfig

# The stages' configs by section; each field tagged RUNNER (gti.options) is set by the
# runner for every stage, so a TOML value for it would be silently overridden: refused.
SECTIONS: dict[str, type] = {
    "sids": SidsConfig,
    "rqvae": RQVAEConfig,
    "grounding": GroundingConfig,
    "sft": SFTConfig,
    "evaluate": EvalConfig,
}
RUNNER_KEYS: dict[str, tuple[str, ...]] = {k: tagged(c, RUNNER) for k, c in SECTIONS.items()}


@dataclass
class ReportSection:
    """The geodiag report comparing every arm at both stages (first seed)."""

    permutations: int = default_of(AnalyzeOptions, "n_permutations")  # as `geodiag report`
    title: str | None = None  # default: "<name>: init and SFT"


@dataclass
class ExperimentConfig:
    name: str = "experiment"
    out: Path = Path("runs/experiment")
    seeds: tuple[int, ...] = (0,)
    arms: tuple[str, ...] = DEFAULT_ARMS
    sft_arms: tuple[str, ...] | None = None  # arms that go past init; None: all of them
    device: str = "auto"  # for every stage
    # torch intra-op threads for every stage; 0 keeps torch's default (one per core).
    # On a shared machine 1 is safer: OpenMP threads spin-waiting against other jobs
    # made SmolLM2 passes 5-10x slower on the 2-core box (measured).
    threads: int = 0
    sids: SidsConfig = field(default_factory=SidsConfig)
    grounding: GroundingConfig = field(default_factory=GroundingConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    evaluate: EvalConfig = field(default_factory=EvalConfig)
    report: ReportSection = field(default_factory=ReportSection)
    cache_dir: Path | None = None
    progress: bool = True
    source: str = "<defaults>"  # the TOML file, for messages

    @property
    def trained_arms(self) -> tuple[str, ...]:
        return self.arms if self.sft_arms is None else self.sft_arms

    def validate(self) -> None:
        where = self.source
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise InputError(
                where, f"seeds must be a non-empty list without repeats, got {list(self.seeds)}"
            )
        unknown = [a for a in (*self.arms, *(self.sft_arms or ())) if a not in ARMS]
        if unknown:
            raise InputError(where, f"unknown arm {unknown[0]!r}; choose from {', '.join(ARMS)}")
        if not self.arms or len(set(self.arms)) != len(self.arms):
            raise InputError(
                where, f"arms must be a non-empty list without repeats, got {list(self.arms)}"
            )
        if self.threads < 0:
            raise InputError(
                where, f"threads must be >= 0 (0: torch's default), got {self.threads}"
            )
        stray = [a for a in self.sft_arms or () if a not in self.arms]
        if stray:
            raise InputError(where, f"sft_arms names {stray[0]!r}, which is not in arms")
        self.sids.validate()
        self.grounding.validate()
        self.sft.validate()
        self.evaluate.validate()


# The sections that configure one gti stage each, shared by ``gti experiment`` and ``gti study``.
STAGE_SECTIONS = ("sids", "grounding", "sft", "evaluate")


def load_config(path: Path, *, out: Path | None = None) -> ExperimentConfig:
    """Read ``path`` (a TOML, or the name of a shipped preset); ``out`` overrides its
    ``out`` key. Relative ``out`` is taken from the current folder, as every other path of
    the CLI."""
    data = read_config(path)
    where = str(path)
    top = {k: v for k, v in data.items() if k not in (*STAGE_SECTIONS, "report")}
    forbidden = (*STAGE_SECTIONS, "report", "source")
    cfg = fill_section(ExperimentConfig, top, where, "top level", forbidden=forbidden)
    cfg.sids, cfg.grounding, cfg.sft, cfg.evaluate = stage_configs(data, where)
    cfg.report = fill_section(ReportSection, data.get("report", {}), where, "report", ())
    cfg.source = where
    if out is not None:
        cfg.out = Path(out)
    cfg.validate()
    return cfg


def read_config(path: Path) -> dict:
    """The table of a config file with its presets resolved (gti.presets: defaults <
    preset < TOML < flags); a path that does not exist may name a shipped preset."""
    from gti.presets import preset_names, read_preset, resolve

    if not Path(path).exists() and str(path) in preset_names():
        return read_preset(str(path))
    return resolve(read_toml(path), str(path))


def read_toml(path: Path) -> dict:
    """The TOML table of ``path``; a missing or malformed file is bad input (exit 2)."""
    path = Path(path)
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(path, "file not found") from None
    except tomllib.TOMLDecodeError as e:
        raise InputError(path, f"not valid TOML ({e})") from None


def stage_configs(
    data: dict, where: str, *, evaluate_forbidden: tuple[str, ...] = ()
) -> tuple[SidsConfig, GroundingConfig, SFTConfig, EvalConfig]:
    """The ``[sids]`` (+ ``[sids.rqvae]``), ``[grounding]``, ``[sft]`` and ``[evaluate]``
    sections of ``data`` as stage configs; keys the runner sets are refused, and so are
    ``evaluate_forbidden`` (keys a caller sets itself)."""
    sids_table = dict(data.get("sids", {}))
    rqvae = fill_section(
        RQVAEConfig, sids_table.pop("rqvae", {}), where, "sids.rqvae", RUNNER_KEYS["rqvae"]
    )
    sids = fill_section(SidsConfig, sids_table, where, "sids", RUNNER_KEYS["sids"] + ("rqvae",))
    sids.rqvae = rqvae
    grounding = fill_section(
        GroundingConfig, data.get("grounding", {}), where, "grounding", RUNNER_KEYS["grounding"]
    )
    sft = fill_section(SFTConfig, data.get("sft", {}), where, "sft", RUNNER_KEYS["sft"])
    evaluate = fill_section(
        EvalConfig,
        data.get("evaluate", {}),
        where,
        "evaluate",
        RUNNER_KEYS["evaluate"] + evaluate_forbidden,
    )
    return sids, grounding, sft, evaluate


def fill_section(
    cls: type, table: object, where: str, section: str, forbidden: tuple[str, ...]
) -> object:
    """``cls(**table)`` with names checked, and types checked against the type hints
    (lists become tuples, strings paths)."""
    if not isinstance(table, dict):
        raise InputError(where, f"[{section}] must be a table")
    fields = {f.name for f in dataclasses.fields(cls)}
    for key in table:
        if key not in fields or key in forbidden:
            known = sorted(k for k in fields if k not in forbidden)
            why = "is set by the runner" if key in forbidden else "is not a known key"
            raise InputError(where, f"[{section}] {key!r} {why}; keys: {', '.join(known)}")
    return from_table(cls, table, where, section)
