"""``run_experiment``: SIDs once, then per seed and arm init -> SFT -> eval, then the
results table and the geodiag report.

Layout under ``out`` (every stage skipped when its output exists, so a re-run
after a kill or with more arms/seeds does only what is missing):

    experiment.json              the resolved config; a re-run must match it
    sids/                        gti sids build
    seed-S/init/<init name>/     gti init (stage init); arms with one init share it
    seed-S/sft/<arm>/            gti sft (stage sft)
    seed-S/eval/<arm>.json       gti evaluate
                                 (names: gti.experiment.layout, Files and experiment_paths)
    results.json, results.md     metrics per arm and split, mean (+ spread) over seeds,
                                 and the wall time of each stage
    report.html, report.json     geodiag report: every arm at both stages (first seed)
    timings.jsonl                one line per stage run: name, seconds, when it finished
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from geodiag.atomic import atomic_write, atomic_write_many
from geodiag.errors import InputError
from geodiag.io.vocabulary.sidecar import FILENAME as SIDECAR_FILENAME
from geodiag.jsonio import dumps
from geodiag.settings import tagged
from gti.evaluate.run import load_result
from gti.experiment.arms import ARMS
from gti.experiment.config import SECTIONS, ExperimentConfig
from gti.experiment.layout import Files, arm_stages, experiment_paths
from gti.experiment.results import summarize, to_markdown
from gti.experiment.summary import load_screen, recall_note, sft_stage_name
from gti.options import PATH, UI

log = logging.getLogger(__name__)
# Settings that decide what finished stages contain; arms, seeds, threads and the
# report may change between runs.
PINNED = ("sids", "grounding", "sft", "evaluate", "device")


@dataclass
class ExperimentResult:
    out: Path
    results_md: Path | None
    results_json: Path | None
    report_html: Path | None
    ran: list[str] = field(default_factory=list)  # stages run by this call
    skipped: list[str] = field(default_factory=list)  # stages found finished


def resolved(cfg: ExperimentConfig) -> dict[str, object]:
    """The config as stored in experiment.json (paths as strings): no UI switches and no
    stage folders (fields tagged UI or PATH, gti.options), which the runner lays out."""
    data = json.loads(dumps(cfg))
    for section in ("sids", "grounding", "sft", "evaluate"):
        for key in tagged(SECTIONS[section], UI) + tagged(SECTIONS[section], PATH):
            data[section].pop(key, None)
    for key in ("progress", "cache_dir", "source", "out"):
        data.pop(key, None)
    return data


def check_or_write_config(cfg: ExperimentConfig) -> None:
    """First run: write experiment.json. Later runs: refuse settings that would make
    finished stages stale, naming what changed."""
    path = Path(cfg.out) / Files.CONFIG
    now = resolved(cfg)
    if path.is_file():
        changed = differences(now, json.loads(path.read_text()))
        if changed:
            raise InputError(
                cfg.source,
                f"{path} was written with other settings ({', '.join(changed[:5])}); finished "
                "stages would not match them: use another `out` (or --out), or delete that folder",
            )
    text = json.dumps(now, indent=1) + "\n"
    if not path.is_file() or path.read_text() != text:  # arms or seeds may have changed
        atomic_write(path, text)


def differences(now: dict, before: dict) -> list[str]:
    """``[section] key`` (or ``key``) of every pinned setting that differs."""
    changed = []
    for name in PINNED:
        a, b = now.get(name), before.get(name)
        if isinstance(a, dict) and isinstance(b, dict):
            changed += [f"[{name}] {k}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        elif a != b:
            changed.append(name)
    return changed


class Stages:
    """Runs a stage unless its output exists; logs what it did and how long it took,
    and appends the time to ``timings`` (a stage that fails records nothing)."""

    def __init__(self, timings: Path) -> None:
        self.ran: list[str] = []
        self.skipped: list[str] = []
        self.timings = timings

    def run(self, name: str, done: Path, fn: Callable[[], object]) -> None:
        if done.exists():
            self.skipped.append(name)
            log.info("= %s: done (%s)", name, done)
            return
        self.timed(name, fn)

    def timed(self, name: str, fn: Callable[[], object]) -> None:
        """Run ``fn`` now, log it and record its wall time."""
        log.info("> %s", name)
        t0 = time.perf_counter()
        fn()
        seconds = time.perf_counter() - t0
        self.ran.append(name)
        log.info("< %s: %.1f s", name, seconds)
        finished = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        record = {"stage": name, "seconds": round(seconds, 1), "finished": finished}
        with self.timings.open("a") as f:
            f.write(json.dumps(record) + "\n")


def stage_seconds(path: Path) -> dict[str, float]:
    """Seconds of each stage's latest run, from ``timings.jsonl`` (empty if absent)."""
    if not path.is_file():
        return {}
    latest: dict[str, float] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            latest[record["stage"]] = float(record["seconds"])
    return latest


def run_experiment(cfg: ExperimentConfig) -> ExperimentResult:
    """Run every stage that has not run yet; returns where the tables and report are."""
    cfg.validate()
    out = Path(cfg.out)
    check_or_write_config(cfg)
    with torch_threads(cfg.threads):
        return _run_stages(cfg, out)


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """``torch.set_num_threads(n)`` for the duration (0: leave torch's default)."""
    import torch

    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _run_stages(cfg: ExperimentConfig, out: Path) -> ExperimentResult:
    from gti.evaluate.run import run_evaluate
    from gti.init.run import run_init
    from gti.semantic_ids.build import build_sids
    from gti.sft.run import run_sft

    stages = Stages(out / Files.TIMINGS)
    common = {"cache_dir": cfg.cache_dir, "progress": cfg.progress}

    sids_dir = out / Files.SIDS
    sids_cfg = replace(cfg.sids, out=sids_dir, **common)
    stages.run("sids", sids_dir / SIDECAR_FILENAME, lambda: build_sids(sids_cfg))

    for seed in cfg.seeds:
        for arm in cfg.arms:
            paths = experiment_paths(out, arm, seed)
            init_cfg, sft_cfg = arm_stages(cfg, arm, seed, paths, sids_dir)
            init_name = ARMS[arm].init_name
            stages.run(
                f"seed {seed} init {init_name}",
                paths.init / SIDECAR_FILENAME,
                lambda c=init_cfg: run_init(c),
            )
            if arm not in cfg.trained_arms:
                continue
            stages.run(
                f"seed {seed} sft {arm}", paths.sft / SIDECAR_FILENAME, lambda c=sft_cfg: run_sft(c)
            )
            eval_cfg = replace(
                cfg.evaluate, checkpoint=paths.sft, out=paths.result, device=cfg.device, **common
            )
            stages.run(f"seed {seed} eval {arm}", paths.result, lambda c=eval_cfg: run_evaluate(c))

    results_md = results_json = None
    if cfg.trained_arms:
        results_md, results_json = write_results(cfg)
    report = out / Files.REPORT
    inputs = report_inputs(cfg)
    if stages.ran or not report_is_current(report, inputs):
        stages.timed("report", lambda: write_geodiag_report(cfg, report, inputs))
    else:
        stages.skipped.append("report")
    return ExperimentResult(out, results_md, results_json, report, stages.ran, stages.skipped)


def write_results(cfg: ExperimentConfig) -> tuple[Path, Path]:
    out = Path(cfg.out)
    evals = {
        arm: {s: load_result(experiment_paths(out, arm, s).result) for s in cfg.seeds}
        for arm in cfg.trained_arms
    }
    summary = summarize(evals, list(cfg.evaluate.ks), list(cfg.evaluate.splits))
    first = next(iter(next(iter(evals.values())).values()))
    notes = [
        f"{first['method']} decoding, {first['beams']} beams, over all {first['settings']['n_items']} items; "
        f"users per split: {first['settings']['max_users'] or 'all'}",
        f"seeds: {', '.join(map(str, cfg.seeds))}"
        + ("; mean ± sample std" if len(cfg.seeds) > 1 else ""),
    ]
    md, js = out / Files.RESULTS_MD, out / Files.RESULTS_JSON
    text = to_markdown(summary, f"{cfg.name}: next-item results", notes)
    atomic_write_many(
        {
            md: text + time_table(cfg, stage_seconds(out / Files.TIMINGS)),
            js: json.dumps(summary, indent=1, allow_nan=False) + "\n",
        }
    )
    return md, js


def time_table(cfg: ExperimentConfig, seconds: dict[str, float]) -> str:
    """Markdown: wall time of init, SFT and eval per arm and seed (from timings.jsonl).

    Arms that share an init (mean and lcrec) show it on each row; a stage found
    finished shows its time from the run that made it, or "-" if none was recorded.
    """
    if not seconds:
        return ""
    lines = [
        "",
        "## wall time per arm (seconds)",
        "",
        "| arm | seed | init | sft | eval | total |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for seed in cfg.seeds:
        for arm in cfg.trained_arms:
            parts = [
                seconds.get(f"seed {seed} init {ARMS[arm].init_name}"),
                seconds.get(f"seed {seed} sft {arm}"),
                seconds.get(f"seed {seed} eval {arm}"),
            ]
            cells = ["-" if p is None else f"{p:.0f}" for p in parts]
            total = "-" if None in parts else f"{sum(parts):.0f}"  # type: ignore[arg-type]
            lines.append(f"| {arm} | {seed} | " + " | ".join(cells) + f" | {total} |")
    if "sids" in seconds:
        lines += ["", f"- SIDs (once, shared by all arms): {seconds['sids']:.0f} s"]
    return "\n".join(lines) + "\n"


def report_inputs(cfg: ExperimentConfig) -> list[Path]:
    """Init checkpoints (one per init strategy, arm order), then the SFT checkpoints."""
    runs = {a: experiment_paths(Path(cfg.out), a, cfg.seeds[0]) for a in cfg.arms}
    inits = list(dict.fromkeys(runs[a].init for a in cfg.arms))
    return inits + [runs[a].sft for a in cfg.arms if a in cfg.trained_arms]


def final_screen(cfg: ExperimentConfig, result: ExperimentResult) -> str:
    """The last screen: each arm's geometry verdict at each stage, per-token findings,
    the report's path (gti.experiment.summary); the recall table before it only when
    enough users were evaluated."""
    stage = sft_stage_name(cfg.sft.steps, cfg.sft.batch_size)
    names: dict[str, tuple[str, str]] = {}
    for arm in cfg.arms:
        paths = experiment_paths(Path(cfg.out), arm, cfg.seeds[0])
        names.setdefault(str(paths.init), (arm, "init"))
        if arm in cfg.trained_arms:
            names[str(paths.sft)] = (arm, stage)
    assert result.report_html is not None
    note_users = None
    if result.results_json is not None:  # the fewest users any arm was evaluated on
        arms = json.loads(result.results_json.read_text())["arms"].values()
        note_users = min(n for a in arms for s in a["splits"].values() for n in s["n_users"])
    text = load_screen(
        result.report_html.with_suffix(".json"), names, note_users, result.results_md
    )
    if result.results_md is not None and recall_note(note_users, result.results_md) is None:
        text = result.results_md.read_text() + "\n" + text
    return text


def report_is_current(report: Path, inputs: list[Path]) -> bool:
    data_path = report.with_suffix(".json")
    if not data_path.is_file():
        return False
    from dataclasses import fields

    from geodiag.gate.checks import GateConfig
    from geodiag.outputs.report.build import REPORT_FORMAT_VERSION

    data = json.loads(data_path.read_text())
    listed = [c["report"]["path"] for c in data.get("checkpoints", [])]
    # A report written by an older geodiag (another format, other checks) is rebuilt.
    same_code = data.get("format_version") == REPORT_FORMAT_VERSION and set(
        data.get("gate_config") or {}
    ) == {f.name for f in fields(GateConfig)}
    return same_code and listed == [str(p) for p in inputs]


def write_geodiag_report(cfg: ExperimentConfig, report: Path, inputs: list[Path]) -> None:
    from geodiag.outputs.report import ReportOptions, write_report

    opts = ReportOptions(
        title=cfg.report.title or f"{cfg.name}: init and SFT",
        n_permutations=cfg.report.permutations,
        seed=cfg.seeds[0],
    )
    write_report(inputs, report, opts=opts, progress=log.info)
