"""Which initialization grounds, per CPU-minute (issue 48, item 3): every row strategy of
``gti init``, alone and as the start of GTI grounding, at equal budgets on 2 cores, measured
by geodiag (RSA per level against the codebooks, the gate) and by ``gti probe`` on the
items grounding held out. Run in pieces, each one small JSON under
``reports/grounding/budget/<world>/``; a piece present is skipped, so a killed run loses at
most the piece it was running. ``tools/grounding_budget_table.py`` assembles the table.

    OMP_WAIT_POLICY=PASSIVE PYTHONPATH=. python -m tools.grounding_budget calibrate ml100k \\
        --scratch /tmp/budget
    OMP_WAIT_POLICY=PASSIVE PYTHONPATH=. python -m tools.grounding_budget grid ml100k \\
        --scratch /tmp/budget

Budgets are not timed live (the machine is shared, its load varies): a grounding step's
cost depends on the objective and the batch, not on the start, so ``calibrate`` measures
seconds per step per objective once, and a budget of B minutes becomes
``floor((B * 60 - init_seconds) / step_seconds)`` steps, recorded in the piece. The init's
seconds are those its budget-0 piece measured (the grid runs it first). Budget 0 is the
row init alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from geodiag.atomic import atomic_write
from geodiag.jsonio import dumps

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "reports" / "grounding" / "budget"
BUDGETS = (0, 1, 4, 16)  # minutes on 2 cores; 0: the row init alone
THREADS = 2
# A piece's steps come from the calibration (on THREADS threads), so the threads a piece runs
# on change its wall time only; GROUNDING_BUDGET_THREADS=1 lets two pieces share the 2 cores.
RUN_THREADS = int(os.environ.get("GROUNDING_BUDGET_THREADS", THREADS))
# Items held out from grounding and asked about by the probe. 128: a share of 6 items (0.047)
# has the Wilson 95% interval [0.022, 0.098], an exact match of 0 the upper bound 0.029 (64
# items: [0.016, 0.129] and 0.057), for twice the probe's cost; within the hold-out cap (a
# tenth) of both worlds (ml100k 1,682 items, office 3,459).
HOLDOUT = 128
# The grounding recipe: the cpu preset's optimizer, lr and batch (reports/grounding), its
# steps replaced by the budget's, without its in-loop structure curve (it costs time).
PRESET = "cpu"
CALIBRATION_STEPS = 5  # the first is left out of the mean (allocations, lazy inits)
OBJECTIVES = ("ce", "distill", "ce+distill")
# The grid's objectives by default: the paper's (the others: --objectives; cost in the README).
GRID_OBJECTIVES = ("ce",)
PIECE_FORMAT = "gti.budget_piece"
CALIBRATION_FILE = "calibration.json"


@dataclass(frozen=True)
class World:
    """Where a world's SIDs, texts and backbone come from."""

    name: str
    sids: Path  # a `gti sids build` folder, or a framework's index (with items)
    items: Path | None = None  # the drop-in route's item texts
    model: str | None = None  # None: the sids folder's own backbone


SHARED = ROOT.parent / "shared" / "data" / "minionerec"
WORLDS = {
    "ml100k": World("ml100k", ROOT / "runs" / "ml100k" / "sids"),
    "office": World(
        "office",
        SHARED / "Office_Products.index.json",
        SHARED / "Office_Products.item.json",
        "smollm2-135m",
    ),
}


@dataclass(frozen=True)
class Piece:
    """One cell: ``strategy`` alone (budget 0) or grounding from it for ``budget`` minutes."""

    strategy: str  # a row strategy (gti.init.REGISTRY): the init, or grounding's start
    budget: float = 0  # minutes
    objective: str = "ce"  # grounding's, when budget > 0
    norm_correct: str = "none"

    @property
    def name(self) -> str:
        norm = "" if self.norm_correct == "none" else f"+norm-{self.norm_correct}"
        if self.budget == 0:
            return f"{self.strategy}{norm}-b0"
        objective = self.objective.replace("+", "-")
        return f"gti-from-{self.strategy}{norm}-{objective}-b{self.budget:g}"

    @property
    def start(self) -> Piece:
        """The budget-0 piece of this piece's start."""
        return Piece(self.strategy, 0, "ce", self.norm_correct)


def steps_for(budget_min: float, init_s: float, step_s: float) -> int:
    """Grounding steps a budget buys once the init's seconds are spent (0 when none)."""
    return max(0, math.floor((budget_min * 60 - init_s) / step_s))


def torch_threads() -> int:
    """The threads torch computes on now."""
    import torch

    return torch.get_num_threads()


def machine() -> dict[str, object]:
    """The CPU's name, the threads used and the load (1, 5, 15 min) now."""
    from gti.study.run import cpu_name

    return {
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "threads": torch_threads(),
        "load": [round(x, 2) for x in os.getloadavg()],
    }


def world_digest(world: World) -> str:
    """sha256 of the world's SID map (pieces of one table must share it)."""
    path = world.sids / "semantic_ids.json" if world.sids.is_dir() else world.sids
    return hashlib.sha256(path.read_bytes()).hexdigest()


def init_args(world: World, piece: Piece, out: Path, steps: int, holdout: int) -> list[str]:
    """``gti init``'s arguments for ``piece`` (grounding ``steps`` when its budget > 0)."""
    args = ["--sids", str(world.sids), "-o", str(out), "--holdout", str(holdout)]
    args += ["--device", "cpu", "--no-progress", "--norm-correct", piece.norm_correct]
    if world.items is not None:
        args += ["--items", str(world.items)]
    if world.model is not None:
        args += ["--model", world.model]
    if piece.budget == 0:
        return [*args, "--strategy", piece.strategy]
    return [
        *args,
        *("--strategy", "gti", "--start-from", piece.strategy, "--objective", piece.objective),
        *("--preset", PRESET, "--steps", str(steps), "--structure-every", "0"),
    ]


@contextmanager
def timed_row_init(record: dict[str, float]):
    """Time the row init (``apply_row_init``) of either route into ``record["init_s"]``:
    ``gti init`` does not report it, and loading the model is no part of a budget."""
    import gti.dropin.run as dropin_run
    import gti.init.run as init_run

    original = init_run.apply_row_init

    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        original(*args, **kwargs)
        record["init_s"] = record.get("init_s", 0.0) + time.perf_counter() - t0

    init_run.apply_row_init = dropin_run.apply_row_init = timed
    try:
        yield record
    finally:
        init_run.apply_row_init = dropin_run.apply_row_init = original


def run_gti_init(args: list[str]) -> dict[str, float]:
    """``gti init ARGS`` in this process; the row init's seconds."""
    from typer.testing import CliRunner

    from gti.cli import app

    with timed_row_init({}) as record:
        res = CliRunner().invoke(app, ["init", *args])
    if res.exit_code != 0:
        raise RuntimeError(f"gti init {' '.join(args)} exited {res.exit_code}: {res.output}")
    return record


def step_seconds(out: Path) -> list[float]:
    """Each grounding step's seconds from ``out``'s train_log.jsonl."""
    lines = (out / "train_log.jsonl").read_text().splitlines()
    return [e["seconds"] for e in map(json.loads, lines) if "loss" in e]


def gate_figures(ckpt: Path) -> dict[str, object]:
    """The gate (geodiag's API, the judge ``geodiag check`` calls) and RSA per level of the
    input rows against the codebooks (None with the reason where it was not measured)."""
    import geodiag
    from geodiag.analysis.options import GATE_MEASURE, AnalyzeOptions
    from geodiag.gate.checks import GateConfig
    from geodiag.gate.verdict import judge

    report = geodiag.measure(
        str(ckpt), options=dataclasses.replace(AnalyzeOptions(), **GATE_MEASURE)
    )
    gate = judge(report, GateConfig())
    rsa = {}
    for lv in report.matrices[0].levels:
        r = lv.rsa
        rsa[lv.name] = (
            {"spearman": r.spearman, "p_value": r.p_value, "n_permutations": r.n_permutations}
            if r is not None and r.undefined_reason is None
            else {"undefined": lv.rsa_skip_reason or (r.undefined_reason if r else "not measured")}
        )
    return {
        "gate": {
            "passed": gate.passed,
            "failed": [c.name for c in gate.checks if c.status == "fail"],
            "warned": [c.name for c in gate.checks if c.status == "warn"],
            "verdict": gate.verdict,
        },
        "rsa": rsa,
    }


def probe_figures(ckpt: Path) -> dict[str, object]:
    """``gti probe``'s JSON of ``ckpt`` (its recorded held-out items), as a dict."""
    from gti.probe.config import ProbeConfig
    from gti.probe.run import run_probe

    result = run_probe(ProbeConfig(checkpoint=ckpt, device="cpu"))
    return json.loads(dumps(result))


def read_json(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def calibrate(
    world: World,
    folder: Path,
    scratch: Path,
    holdout: int = HOLDOUT,
    objectives: tuple[str, ...] = OBJECTIVES,
) -> Path:
    """Seconds per grounding step of each of ``objectives`` not yet in ``folder``'s
    calibration.json, from the mean, on THREADS threads; merged into that file."""
    path = folder / CALIBRATION_FILE
    record = read_json(path) or {
        "format": "gti.budget_calibration",
        "world": world.name,
        "sids_sha256": world_digest(world),
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine_before": machine(),
        "steps": CALIBRATION_STEPS,
        "objectives": {},
    }
    todo = [o for o in objectives if o not in record["objectives"]]
    if not todo:
        print(f"present: {path}")
        return path
    import torch

    torch.set_num_threads(THREADS)
    for objective in todo:
        out = scratch / f"calibrate-{objective.replace('+', '-')}"
        shutil.rmtree(out, ignore_errors=True)
        args = init_args(world, Piece("mean", 1, objective), out, CALIBRATION_STEPS, holdout)
        load = machine()["load"]
        run_gti_init(args)
        seconds = step_seconds(out)
        shutil.rmtree(out)
        timed = seconds[1:] or seconds
        record["objectives"][objective] = {
            "step_s": sum(timed) / len(timed),
            "steps_s": seconds,
            "load_before": load,
            "load_after": machine()["load"],
            "command": "gti init " + " ".join(args),
        }
    record["machine_after"] = machine()
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write(path, dumps(record) + "\n")
    print(f"wrote {path}")
    return path


def run_piece(
    world: World,
    piece: Piece,
    folder: Path,
    scratch: Path,
    *,
    holdout: int = HOLDOUT,
    keep: bool = False,
) -> Path:
    """Run ``piece`` unless its JSON is present, measure it, write its JSON atomically (the
    checkpoint in ``scratch`` is deleted after measuring, unless ``keep``)."""
    path = folder / f"{piece.name}.json"
    if path.is_file():
        print(f"present: {path}")
        return path
    import torch

    torch.set_num_threads(RUN_THREADS)
    conversion: dict[str, object] | None = None
    steps = 0
    if piece.budget > 0:
        calibration = read_json(folder / CALIBRATION_FILE)
        if calibration is None:
            raise SystemExit(f"{folder / CALIBRATION_FILE} is missing: run `calibrate` first")
        start = read_json(run_piece(world, piece.start, folder, scratch, holdout=holdout))
        if piece.objective not in calibration["objectives"]:
            raise SystemExit(f"{folder / CALIBRATION_FILE}: no {piece.objective}; calibrate it")
        step_s = calibration["objectives"][piece.objective]["step_s"]
        init_s = start["init_s"]  # type: ignore[index]
        steps = steps_for(piece.budget, init_s, step_s)
        conversion = {
            "budget_s": piece.budget * 60,
            "init_s": init_s,
            "step_s": step_s,
            "steps": steps,
            "rule": "floor((budget_s - init_s) / step_s)",
            "calibration": {k: calibration[k] for k in ("date", "machine_before", "steps")},
        }
    if piece.budget > 0 and steps == 0:
        raise SystemExit(f"{piece.name}: the init alone spends the budget; nothing to run")
    out = scratch / piece.name
    shutil.rmtree(out, ignore_errors=True)  # a killed piece's leftovers: start afresh
    args = init_args(world, piece, out, steps, holdout)
    before = machine()
    t0 = time.perf_counter()
    timing = run_gti_init(args)
    wall = time.perf_counter() - t0
    t1 = time.perf_counter()
    figures = gate_figures(out)
    t2 = time.perf_counter()
    probe = probe_figures(out)
    t3 = time.perf_counter()
    record = {
        "format": PIECE_FORMAT,
        "world": world.name,
        "sids_sha256": world_digest(world),
        "piece": piece.name,
        **dataclasses.asdict(piece),
        "command": "gti init " + " ".join(args),
        "conversion": conversion,
        "init_s": timing.get("init_s", 0.0),
        "train_s": sum(step_seconds(out)) if piece.budget > 0 else 0.0,
        "init_command_wall_s": wall,
        **figures,
        "probe": probe,
        "measure_s": {"geodiag": t2 - t1, "probe": t3 - t2},
        "machine": before,
        "load_after": machine()["load"],
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
    }
    if not keep:
        shutil.rmtree(out)
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write(path, dumps(record) + "\n")
    print(f"wrote {path}")
    return path


def grid(
    strategies: list[str],
    budgets: list[float],
    objectives: list[str],
    norm_correct: str = "none",
) -> list[Piece]:
    """Every strategy at budget 0 (when 0 is a budget), then grounding from each at each
    budget and objective."""
    out = [Piece(s, 0, "ce", norm_correct) for s in strategies if 0 in budgets]
    for b in (b for b in budgets if b > 0):
        for objective in objectives:
            out += [Piece(s, b, objective, norm_correct) for s in strategies]
    return out


def applicable(world: World, strategy: str) -> bool:
    """A codebook strategy needs the world's codebooks (MiniOneRec's Office has none here)."""
    from gti.init import needs

    return "codebooks" not in needs(strategy) or world.items is None


def ensure_sids(world: World) -> None:
    """Build ml100k's SIDs as `gti sids build` does by default when the folder is absent."""
    if world.items is not None or world.sids.exists():
        return
    cmd = [sys.executable, "-m", "gti.cli", "sids", "build", "--data", "movielens-100k"]
    subprocess.run([*cmd, "--model", "smollm2-135m", "-o", str(world.sids)], check=True)


def world_of(args: argparse.Namespace) -> World:
    world = WORLDS[args.world]
    changes = {k: getattr(args, k) for k in ("sids", "items", "model") if getattr(args, k)}
    return dataclasses.replace(world, **changes)


def main(argv: list[str] | None = None) -> int:
    from gti.init import REGISTRY

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=("calibrate", "piece", "grid"))
    p.add_argument("world", choices=tuple(WORLDS))
    p.add_argument("--scratch", type=Path, required=True, help="where checkpoints are written")
    p.add_argument("--results", type=Path, default=RESULTS, help="folder of the worlds' JSONs")
    p.add_argument("--sids", type=Path, help="the world's SIDs folder or index file")
    p.add_argument("--items", type=Path, help="the world's item texts (drop-in route)")
    p.add_argument("--model", help="the backbone (default: the world's)")
    p.add_argument("--strategies", default=",".join(REGISTRY), help="comma-separated")
    p.add_argument("--budgets", default=",".join(map(str, BUDGETS)), help="minutes")
    p.add_argument(
        "--objectives", default=",".join(GRID_OBJECTIVES), help=f"of {','.join(OBJECTIVES)}"
    )
    p.add_argument("--norm-correct", default="none")
    p.add_argument("--holdout", type=int, default=HOLDOUT)
    p.add_argument("--keep", action="store_true", help="keep the checkpoints in --scratch")
    args = p.parse_args(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts its threads
    world = world_of(args)
    ensure_sids(world)
    folder = args.results / world.name
    if args.what == "calibrate":
        calibrate(world, folder, args.scratch, args.holdout, tuple(args.objectives.split(",")))
        return 0
    strategies = [s for s in args.strategies.split(",") if applicable(world, s)]
    budgets = [float(b) for b in args.budgets.split(",")]
    objectives = args.objectives.split(",")
    pieces = grid(strategies, budgets, objectives, args.norm_correct)
    if args.what == "piece" and len(pieces) != 1:
        p.error(f"`piece` runs one piece; --strategies/--budgets/--objectives name {len(pieces)}")
    for piece in pieces:
        run_piece(world, piece, folder, args.scratch, holdout=args.holdout, keep=args.keep)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
