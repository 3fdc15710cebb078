"""One (arm, seed) of the study: init -> SFT with checkpoints at fixed fractions of the
steps -> at each: geometry (geodiag) and the curve split's per-user lists -> at the
last: the final splits' lists (and a geodiag report of init vs final).

Self-contained and resumable at every level: the init and every measured milestone
are skipped when their outputs exist; SFT stops at each milestone through its
resume state (``gti.sft``: the same examples, the same updates as one straight
run) and a killed SFT resumes from its last save; a killed ranking resumes at the
first unranked user (``gti.study.ranking``).

Work folder (weights; never committed), ``<work>/`` (gti.experiment.layout.study_paths;
the file names: its ``Files``)::

    sids/                         copied from sids_from, or built
    init/<strategy>-seed<k>/      gti init (shared by arms with that init)
    <arm>-seed<k>/sft/            the final SFT checkpoint; sft.partial/ while running
    <arm>-seed<k>/step-<n>/       a milestone's checkpoint, deleted once measured

Report folder (small, committed as soon as the run finishes),
``<reports>/runs/<arm>-seed<k>/``::

    run.json                      settings, milestones, machine, tokens/example, status
    timings.jsonl                 one line per stage: name, seconds, finished
    geometry.json                 {step: geodiag figures (gti.study.geometry), init_digest}
    curve/step-<n>.<split>.rankings.json   per-user top-20 at each milestone
    final/<split>.rankings.json   the final splits at the last milestone
    train_log.jsonl               SFT loss per step
    report.html                   geodiag report, init vs final (first seed only)
"""

from __future__ import annotations

import json
import logging
import os
import platform
import shlex
import shutil
import sys
from dataclasses import replace
from pathlib import Path

from geodiag.atomic import atomic_write
from geodiag.io.formats.tensor_store import digest_text, new_digest
from geodiag.io.vocabulary.sidecar import FILENAME as SIDECAR_FILENAME
from gti.checkpoint_files import SFT_CONFIG_FILENAME, partial_dir
from gti.experiment.arms import ARMS
from gti.experiment.layout import (
    Files,
    RunPaths,
    arm_stages,
    curve_file,
    final_file,
    run_name,
    study_paths,
)
from gti.experiment.runner import Stages
from gti.study.config import StudyConfig

log = logging.getLogger(__name__)
RUN_FORMAT = "gti.study.run"


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), else what ``platform`` knows of it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, object]:
    """What the timings were measured on (CPU name, cores, load, torch, device)."""
    import torch

    info: dict[str, object] = {
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "load_avg_1_5_15": [round(v, 2) for v in os.getloadavg()],
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def prepare_sids(cfg: StudyConfig) -> Path:
    """``<work>/sids``: a copy of ``sids_from`` (never written into), or built."""
    out = Path(cfg.work) / Files.SIDS
    if (out / SIDECAR_FILENAME).is_file():
        return out
    if cfg.sids_from is not None:
        src = Path(cfg.sids_from)
        if not (src / SIDECAR_FILENAME).is_file():
            from geodiag.errors import InputError

            raise InputError(src, f"holds no {SIDECAR_FILENAME}; pass a `gti sids build` folder")
        tmp = out.with_name("sids.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(src, tmp)
        tmp.rename(out)
        return out
    from gti.semantic_ids.build import build_sids

    build_sids(replace(cfg.sids, out=out, cache_dir=cfg.cache_dir, progress=cfg.progress))
    return out


def init_digest(init_dir: Path) -> str:
    """The digest (geodiag's ``new_digest``, as reports give it) over the init's weight
    files (``*.safetensors``, each name then its bytes, in name order): which build of the
    init a milestone descends from. The init is a pure function of the config and seed up
    to float reduction order, so an init rebuilt after the work folder lost it (another
    thread count, another machine) can differ from the build earlier milestones trained
    from; geometry.json records the digest at every milestone so that shows."""
    h = new_digest()
    for f in sorted(init_dir.glob("*.safetensors")):
        h.update(f.name.encode() + b"\0")
        with f.open("rb") as fh:
            for chunk in iter(lambda fh=fh: fh.read(1 << 24), b""):
                h.update(chunk)
    return digest_text(h)


def other_init_builds(geometry: dict, digest: str) -> list[int]:
    """The milestones of ``geometry`` (a geometry.json) recorded from an init build other
    than ``digest`` (milestones recorded before digests were kept say nothing)."""
    return sorted(
        int(step) for step, g in geometry.items()
        if g.get("init_digest") not in (None, digest)
    )  # fmt: skip


def _json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def _resume_step(sft_out: Path) -> int | None:
    from gti.sft.checkpoint import TRAINER_STATE

    for name in ("state", "state.old"):
        p = partial_dir(sft_out) / name / TRAINER_STATE
        if p.is_file():
            return int(json.loads(p.read_text())["step"])
    return None


def materialize(sft_cfg, snap: Path) -> Path:
    """Write the SFT resume state as a contract checkpoint at ``snap`` (its step).

    Loads it exactly as a resumed run does (``accelerator.load_state`` into the
    prepared model and optimizer), then writes the folder ``gti sft`` would.
    """
    import torch

    from gti.checkpoint_files import partial_dir, write_checkpoint
    from gti.data.tasks import dataset_of
    from gti.sft.checkpoint import CONFIG_FILENAME, TRAINER_STATE, quiet
    from gti.sft.loss import AnswerLoss
    from gti.sft.run import apply_freeze, load_checkpoint, make_accelerator, sft_sidecar
    from gti.training import make_optimizer

    state_dir = partial_dir(Path(sft_cfg.out)) / "state"
    if not (state_dir / TRAINER_STATE).is_file():
        state_dir = state_dir.with_name("state.old")
    state = json.loads((state_dir / TRAINER_STATE).read_text())
    accelerator = make_accelerator(sft_cfg)
    model, tokenizer, sids = load_checkpoint(Path(sft_cfg.init), getattr(torch, sft_cfg.dtype))
    apply_freeze(model, sft_cfg.freeze)
    # Prepared as gti.sft.trainer prepares them: load_state fills them by position.
    loss_fn, _opt = accelerator.prepare(
        AnswerLoss(model), make_optimizer(model.parameters(), sft_cfg)
    )
    with quiet("accelerate"):
        accelerator.load_state(str(state_dir))
    trained = accelerator.unwrap_model(loss_fn).model
    step = int(state["step"])
    data = dataset_of(sids, sft_cfg.data, sft_cfg.init)
    codebooks = Path(sft_cfg.init) / "codebooks.safetensors"
    run_config = {
        "materialized_from": str(state_dir),
        "step": step,
        "arm": sft_cfg.arm,
        "seed": sft_cfg.seed,
        "max_history": sft_cfg.max_history,
        "k_core": sft_cfg.k_core,
        "titles": sft_cfg.titles,
        "system_prompt": sft_cfg.system_prompt,
    }
    write_checkpoint(
        snap,
        trained,
        tokenizer,
        sft_sidecar(sids, sft_cfg, step, data, snap),
        codebooks if codebooks.is_file() else None,
        CONFIG_FILENAME,
        run_config,
        state["log"],
    )
    return snap


def sft_until(sft_cfg, step: int, snap: Path, stages: Stages) -> Path:
    """The checkpoint after ``step`` optimizer steps of ``sft_cfg``'s run."""
    from gti.errors import Interrupted
    from gti.sft.run import run_sft

    if step >= sft_cfg.steps:
        done = Path(sft_cfg.out)
        stages.run(f"sft ->{step}", done / SIDECAR_FILENAME, lambda: run_sft(sft_cfg))
        return done
    if (snap / SIDECAR_FILENAME).is_file():
        return snap
    at = _resume_step(Path(sft_cfg.out))
    if at is not None and at > step:
        from geodiag.errors import InputError

        raise InputError(
            snap, f"the SFT resume state is at step {at}, past milestone {step}; delete it"
        )

    def segment() -> None:
        if at != step:
            try:
                run_sft(sft_cfg, should_stop=lambda s: s >= step)
            except Interrupted as e:
                if e.step != step:
                    raise
        materialize(sft_cfg, snap)

    stages.timed(f"sft ->{step}", segment)
    return snap


def run_one(cfg: StudyConfig, arm: str, seed: int, *, command: str | None = None) -> Path:
    """Run (or finish) one (arm, seed); returns its report folder."""
    from geodiag.io.vocabulary.sidecar import load
    from gti.data.tasks import dataset_of, load_task_data, sample_users
    from gti.init.run import run_init

    cfg.validate()
    paths = study_paths(cfg.work, cfg.reports, arm, seed)
    init_dir, rdir = paths.init, paths.result
    rdir.mkdir(parents=True, exist_ok=True)
    stages = Stages(rdir / Files.TIMINGS)
    sids_dir = prepare_sids(cfg)
    init_cfg, sft_cfg = arm_stages(cfg, arm, seed, paths, sids_dir)
    init_name = ARMS[arm].init_name
    stages.run(f"init {init_name}", init_dir / SIDECAR_FILENAME, lambda: run_init(init_cfg))
    digest = init_digest(init_dir)
    if other := other_init_builds(_json(rdir / Files.GEOMETRY), digest):
        log.warning(
            "%s: the init in %s is not the build milestones %s were trained from (rebuilt, "
            "its float reductions in another order); the new milestones record its digest",
            run_name(arm, seed), init_dir, other,
        )  # fmt: skip

    sids = load(init_dir)
    data = dataset_of(sids, sft_cfg.data, init_dir)
    task = load_task_data(
        sids,
        data,
        k_core_min=cfg.sft.k_core,
        max_history=cfg.sft.max_history,
        cache_dir=cfg.cache_dir,
    )
    per_epoch = None
    if cfg.epochs:  # the steps follow from the stream's epoch size
        per_epoch = cfg.resolve_epochs(epoch_size(sft_cfg, task, init_dir))
        _, sft_cfg = arm_stages(cfg, arm, seed, paths, sids_dir)
    # The state after the last step stays, so a plan grown later (more epochs) continues.
    sft_cfg = replace(sft_cfg, keep_state=True)
    users = sample_users(task, cfg.evaluate.max_users, cfg.evaluate.seed)
    rank_kw = rank_options(cfg)
    milestones = cfg.milestones()
    retire_final(cfg, sft_cfg, paths, milestones)
    for step in milestones:
        rankings = milestone_rankings(cfg, rdir, step, last=step == milestones[-1])
        if is_measured(rdir, step, rankings):
            stages.skipped.append(f"step {step}")
        else:
            measure_milestone(
                cfg, arm, seed, step, sft_cfg, paths, task, users, rankings, rank_kw, stages,
                init_build=digest,
            )  # fmt: skip
        if step != milestones[-1]:  # a piece to commit while the run goes on
            measured = [m for m in milestones if m <= step]
            write_run_json(
                cfg, arm, seed, paths, task, command, measured=measured, steps_per_epoch=per_epoch
            )

    final = Path(sft_cfg.out) if milestones[-1] > 0 else init_dir
    train_log = final / Files.TRAIN_LOG
    if train_log.is_file():
        shutil.copyfile(train_log, rdir / Files.TRAIN_LOG)
    report_run(cfg, arm, seed, init_dir, final, rdir, stages)
    write_run_json(cfg, arm, seed, paths, task, command, steps_per_epoch=per_epoch)
    return rdir


def is_measured(rdir: Path, step: int, rankings: list[tuple[str, Path]]) -> bool:
    """Whether milestone ``step`` has its geometry and every file of ``rankings``
    (:func:`milestone_rankings`)."""
    return str(step) in _json(rdir / Files.GEOMETRY) and all(p.is_file() for _, p in rankings)


def retire_final(cfg: StudyConfig, sft_cfg, paths: RunPaths, milestones: list[int]) -> None:
    """When the plan has grown past the run's final SFT checkpoint (more epochs added to
    the study), that checkpoint becomes an intermediate milestone: its final splits'
    lists move to ``curve/step-<n>.<split>.rankings.json`` (kept, so the earlier budget's
    test stays on record) and the checkpoint gives way to the longer run, which continues
    from the resume state kept at its last step (``keep_state``) when the rate is constant
    after warmup (``min_lr_ratio`` 1: the longer run repeats the shorter one's updates),
    else re-trains from the init. A final checkpoint past the plan's last milestone is
    refused."""
    done = Path(sft_cfg.out)
    if not (done / SIDECAR_FILENAME).is_file():
        return
    steps = int(_json(done / SFT_CONFIG_FILENAME)["steps"])
    if steps == sft_cfg.steps:
        return
    if steps > sft_cfg.steps:
        from geodiag.errors import InputError

        raise InputError(
            done,
            f"was trained for {steps} steps, past the plan's last milestone {sft_cfg.steps}; "
            "delete it (and its .partial state) to re-run the shorter plan",
        )
    rdir = paths.result
    for split in cfg.final_splits:
        src = rdir / final_file(split)
        if src.is_file() and _json(src).get("source", {}).get("step") == steps:
            dst = rdir / curve_file(steps, split)
            if not dst.is_file():
                dst.parent.mkdir(parents=True, exist_ok=True)
                src.rename(dst)
            else:
                src.unlink()  # the curve split, measured again as a final one
    measured = is_measured(rdir, steps, milestone_rankings(cfg, rdir, steps, last=False))
    snap = paths.milestone(steps)
    if steps in milestones and not measured and not (snap / SIDECAR_FILENAME).is_file():
        done.rename(snap)  # measured there as the intermediate milestone it now is
    else:
        shutil.rmtree(done)
    if sft_cfg.min_lr_ratio != 1.0:  # the rate decays over the run's length
        shutil.rmtree(partial_dir(done), ignore_errors=True)
        log.warning(
            "%s: the plan grew from %d to %d SFT steps and the rate decays over the whole "
            "run (min_lr_ratio %g), so every step's rate changed: re-training from the init",
            done, steps, sft_cfg.steps, sft_cfg.min_lr_ratio,
        )  # fmt: skip
        return
    kept = _resume_step(done)
    log.warning(
        "%s: the plan grew from %d to %d SFT steps: %s",
        done, steps, sft_cfg.steps,
        f"continuing from the resume state kept at step {kept}" if kept is not None
        else f"no resume state kept in {partial_dir(done)}, re-training from the init",
    )  # fmt: skip


def epoch_size(sft_cfg, task, init_dir: Path) -> int:
    """Examples per epoch of the stream ``sft_cfg`` trains on (windows, or prompts)."""
    from transformers import AutoTokenizer

    from gti.sft.run import make_stream

    tokenizer = AutoTokenizer.from_pretrained(init_dir, local_files_only=True)
    return make_stream(sft_cfg, tokenizer, task).epoch_size


def measure_milestone(
    cfg, arm, seed, step, sft_cfg, paths: RunPaths, task, users, rankings, rank_kw, stages,
    *, init_build: str | None = None,
):  # fmt: skip
    """The checkpoint after ``step`` SFT steps (trained up to it if need be), its geometry
    (with ``init_build``, :func:`init_digest` of the init on disk) and its ``rankings``
    (:func:`milestone_rankings`); an intermediate checkpoint is deleted once measured."""
    rdir = paths.result
    snap = paths.milestone(step)
    ckpt = paths.init if step == 0 else sft_until(sft_cfg, step, snap, stages)
    if str(step) not in _json(rdir / Files.GEOMETRY):
        stages.timed(
            f"geometry step {step}",
            lambda c=ckpt, s=step: record_geometry(
                cfg, seed, c, s, rdir / Files.GEOMETRY, init_build=init_build
            ),
        )
    rank_milestone(cfg, arm, seed, step, ckpt, task, users, rankings, rank_kw, stages)
    if 0 < step < sft_cfg.steps:
        shutil.rmtree(snap, ignore_errors=True)


def rank_options(cfg: StudyConfig) -> dict[str, object]:
    """The keywords of every ``rank_split`` call of a run: decoding, prompt, device.
    Every milestone, the init's included, is ranked in the layout SFT trains on."""
    from gti.evaluate.layout import PromptLayout

    return {
        "beams": cfg.evaluate.beams,
        "batch_size": cfg.evaluate.batch_size,
        "layout": PromptLayout.of_sft(cfg.sft),
        "device": _device(cfg.device),
        "progress": cfg.progress,
    }


def milestone_rankings(
    cfg: StudyConfig, rdir: Path, step: int, *, last: bool
) -> list[tuple[str, Path]]:
    """(split, rankings file) of a milestone: the curve split's, and at the ``last``
    milestone the final splits' too."""
    rankings = [(cfg.curve_split, rdir / curve_file(step, cfg.curve_split))]
    return rankings + ([(s, rdir / final_file(s)) for s in cfg.final_splits] if last else [])


def record_geometry(
    cfg: StudyConfig,
    seed: int,
    ckpt: Path,
    step: int,
    geo_path: Path,
    *,
    init_build: str | None = None,
) -> None:
    """geodiag's figures of ``ckpt`` into ``geo_path`` under ``step``, steps ascending;
    ``init_build``: the init build it descends from (:func:`init_digest`), recorded as
    ``init_digest``."""
    from gti.study.geometry import measure

    figures = measure(ckpt, permutations=cfg.permutations, seed=seed)
    figures["examples"] = step * cfg.sft.batch_size
    if init_build is not None:
        figures["init_digest"] = init_build
    geo = _json(geo_path)
    geo[str(step)] = figures
    ordered = dict(sorted(geo.items(), key=lambda kv: int(kv[0])))
    atomic_write(geo_path, json.dumps(ordered, indent=1, allow_nan=False) + "\n")


def rank_milestone(
    cfg: StudyConfig,
    arm: str,
    seed: int,
    step: int,
    ckpt: Path,
    task,
    users,
    rankings: list[tuple[str, Path]],
    rank_kw: dict[str, object],
    stages: Stages,
) -> None:
    """Rank ``ckpt`` on each split of ``rankings`` (:func:`milestone_rankings`) for the
    sampled ``users`` into its file; a file already on disk is kept."""
    from gti.data.tasks import of_users
    from gti.study.ranking import rank_split

    for split, path in rankings:
        examples = of_users(getattr(task.splits, split), users)
        source = {"model": arm, "seed": seed, "step": step, "examples": step * cfg.sft.batch_size}
        stages.run(
            f"rank {split} step {step}",
            path,
            lambda c=ckpt, ex=examples, p=path, s=split, src=source: rank_split(
                c, task, ex, p, split=s, source=src, **rank_kw
            ),
        )


def report_run(
    cfg: StudyConfig, arm: str, seed: int, init_dir: Path, final: Path, rdir: Path, stages: Stages
) -> None:
    """geodiag's HTML report of init vs final, for the first seed only and once."""
    report_html = rdir / Files.REPORT
    if cfg.report_html and seed == cfg.seeds[0] and not report_html.is_file():
        from geodiag.outputs.report import ReportOptions, write_report

        opts = ReportOptions(
            title=f"{cfg.name}: {run_name(arm, seed)}, init vs final SFT",
            n_permutations=cfg.permutations,
            seed=seed,
        )

        def report() -> None:
            write_report([init_dir, final], report_html, opts=opts)
            # Every number of the HTML, ~1 MB per run: too large to commit for each run.
            report_html.with_suffix(".json").unlink(missing_ok=True)

        stages.timed("report", report)
    report_html.with_suffix(".json").unlink(missing_ok=True)  # left by a kill in report()


def _device(spec: str) -> str:
    import torch

    if spec == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return spec


def tokens_per_example(cfg: StudyConfig, task, init_dir: Path, n: int) -> dict[str, float]:
    """Mean tokens and loss tokens of the first ``n`` examples (prompts, or windows) of
    the stream SFT trains on."""
    from transformers import AutoTokenizer

    from gti.sft.run import make_stream
    from gti.sft.sequence import SequenceStream

    tok = AutoTokenizer.from_pretrained(init_dir, local_files_only=True)
    stream = make_stream(cfg.sft, tok, task)
    if isinstance(stream, SequenceStream):
        windows = [stream.window(i) for i in range(n)]
        lengths = [len(w.input_ids) for w in windows]
        answers = [sum(w.in_loss) for w in windows]
    else:
        examples = [stream.example(i) for i in range(n)]
        lengths = [len(e.input_ids) for e in examples]
        answers = [len(e.input_ids) - e.answer_start for e in examples]
    return {"examples": n, "tokens": sum(lengths) / n, "answer_tokens": sum(answers) / n}


def sft_step_seconds(train_log: Path, steps: int) -> float | None:
    """Training time of SFT from its per-step log: each of the ``steps`` steps counted
    once, checkpoint saves, milestone rankings and work lost to a kill left out (a
    resumed stage's wall time covers only its last attempt). None without a complete
    log."""
    if not train_log.is_file():
        return None
    rows = [json.loads(line) for line in train_log.read_text().splitlines() if line.strip()]
    by_step = {r["step"]: r.get("seconds") for r in rows}
    if sorted(by_step) != list(range(1, steps + 1)) or None in by_step.values():
        return None
    return float(sum(by_step.values()))


def write_run_json(
    cfg,
    arm,
    seed,
    paths: RunPaths,
    task,
    command,
    *,
    measured: list[int] | None = None,
    steps_per_epoch: float | None = None,
) -> None:
    """run.json: status "complete", or "in progress" with the ``measured`` milestones
    (written after each one, so a run that outlives a session leaves its pieces).
    ``steps_per_epoch``: what :meth:`StudyConfig.resolve_epochs` found (milestones in
    epochs), else None."""
    from gti.experiment.runner import stage_seconds

    rdir = paths.result
    seconds = stage_seconds(rdir / Files.TIMINGS)
    n_examples = cfg.sft.steps * cfg.sft.batch_size
    step_s = sft_step_seconds(rdir / Files.TRAIN_LOG, cfg.sft.steps)
    sft_s = step_s or sum(v for k, v in seconds.items() if k.startswith("sft ->"))
    doc = {
        "format": RUN_FORMAT,
        "format_version": 1,
        "status": "complete" if measured is None else "in progress",
        "name": cfg.name,
        "arm": arm,
        "seed": seed,
        "milestones": cfg.milestones(),
        "measured": cfg.milestones() if measured is None else measured,
        "examples_per_step": cfg.sft.batch_size,
        "objective": cfg.sft.objective,
        # Milestones in epochs: steps per epoch of the stream (None: fractions of steps).
        "epochs": list(cfg.epochs) or None,
        "steps_per_epoch": None if steps_per_epoch is None else round(steps_per_epoch, 6),
        "curve_split": cfg.curve_split,
        "final_splits": list(cfg.final_splits),
        "users": "all" if cfg.evaluate.max_users is None else cfg.evaluate.max_users,
        "config": json.loads(_config_json(cfg)),
        "command": command or " ".join(shlex.quote(a) for a in sys.argv),
        "machine": machine(),
        "stage_seconds": seconds,
        "sft_seconds": round(sum(v for k, v in seconds.items() if k.startswith("sft ->")), 1),
        "sft_step_seconds": None if step_s is None else round(step_s, 1),
        "sft_examples_per_s": round(n_examples / sft_s, 4) if sft_s > 0 else None,
        "tokens_per_example": tokens_per_example(cfg, task, paths.init, min(n_examples, 512)),
    }
    atomic_write(rdir / Files.RUN, json.dumps(doc, indent=1, allow_nan=False) + "\n")


def _config_json(cfg: StudyConfig) -> str:
    from geodiag.jsonio import dumps

    data = json.loads(dumps(cfg))
    for section in ("sids", "sft", "evaluate"):
        for key in ("progress", "cache_dir", "out", "init", "checkpoint"):
            data[section].pop(key, None)
    for key in ("progress", "cache_dir"):
        data.pop(key, None)
    return json.dumps(data)


def run_all(cfg: StudyConfig, *, command: str | None = None) -> list[Path]:
    """Every (arm, seed) in run order (mean and gti first); finished runs are skipped."""
    out = []
    for arm, seed in cfg.ordered_runs():
        rdir = study_paths(cfg.work, cfg.reports, arm, seed).result
        if _json(rdir / Files.RUN).get("status") == "complete":
            log.info("= %s: complete", rdir)
            out.append(rdir)
            continue
        out.append(run_one(cfg, arm, seed, command=command))
    return out
