"""Structure over training: one JSON line per measurement, and series read back for reports.

Record schema (shared with gti grounding's ``train_log.jsonl``; readers ignore extra
keys)::

    {"step": int, "elapsed_s": float | null,
     "structure": {"effective_rank_ratio": float | null, "spread_relative": float | null,
                   "mean_pairwise_cosine": float | null,
                   "rsa": {"<level>": float | null, ...}, "rsa_p": {"<level>": float | null, ...},
                   "code_accuracy": {...} (optional), "code_accuracy_chance": {...} (optional),
                   "effective_rank": float (optional), "n_untrained": int (optional),
                   "movement": float | null, "n_unmoved": int | null,
                   "unmoved_fraction": float | null, "unmoved_by_level": {"<level>": float},
                   "identical_rows": int, "grad_norm": float | null (optional, the callback),
                   "n_untrained_spared": int (optional, the callback)}}

The optional keys of the callback's snapshots: ``effective_rank`` (centered, absolute),
``n_untrained`` (rows not moved since the run's first snapshot, or in a group of
identical rows, :func:`geodiag.metrics.snapshot.untrained`, that the gate's rule counts:
fed by an item's SID or the training data, or of unknown use; the others are
``n_untrained_spared``), ``movement`` (RMS distance of
the new rows to their first snapshot / the vocabulary's spread), ``n_unmoved`` and
``unmoved_fraction`` (null at the first snapshot), per level ``unmoved_by_level``,
``identical_rows`` (rows in a group of identical rows) and ``grad_norm`` (L2 norm of the
new rows' gradient at that optimizer step, after clipping; null where the Trainer does not
expose it). A full analysis (``"kind": "gate"``, checkpoint series) records
``effective_rank`` and ``n_untrained`` by the gate's definition.

A series comes from such a file (``geodiag_trajectory.jsonl`` of
:class:`geodiag.callback.GeodiagCallback`, or any JSONL whose lines carry
``structure``), or from an ordered set of checkpoints of one run: Hugging Face
Trainer's ``checkpoint-N`` folders (ordered by N) or gti checkpoints (ordered by the
sidecar provenance ``step``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from geodiag.analysis.reports import CheckpointReport
from geodiag.errors import InputError, cannot_read, nested_too_deeply
from geodiag.gate.checks import VALUES, CheckName, rsa_by_level, rsa_p_by_level
from geodiag.io.sources.remote import is_remote
from geodiag.metrics.snapshot import Snapshot

TRAJECTORY_FILENAME = "geodiag_trajectory.jsonl"
CHECKPOINT_DIR = re.compile(r"^checkpoint-(\d+)$")  # transformers' PREFIX_CHECKPOINT_DIR
C = CheckName
METRICS = (C.EFFECTIVE_RANK_RATIO, C.SPREAD_RELATIVE, C.MEAN_PAIRWISE_COSINE)
# Series that only some records carry (the callback's row-by-row findings): None elsewhere.
ROW_METRICS = (C.EFFECTIVE_RANK, C.N_UNTRAINED, "movement", "unmoved_fraction", "grad_norm")


def _finite(x: object) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return float(x) if math.isfinite(x) else None


def structure_of_snapshot(s: Snapshot) -> dict:
    out = {
        C.EFFECTIVE_RANK_RATIO: s.effective_rank_ratio,
        C.EFFECTIVE_RANK: s.effective_rank,
        C.SPREAD_RELATIVE: s.spread_relative,
        C.MEAN_PAIRWISE_COSINE: s.mean_pairwise_cosine,
        C.RSA: dict(s.rsa),
        "rsa_p": dict(s.rsa_p),
    }
    r = s.rows
    if r is not None:
        out[C.N_UNTRAINED] = r.n_untrained
        out.update(
            movement=r.movement,
            n_unmoved=r.n_unmoved,
            unmoved_fraction=None if r.n_unmoved is None else r.n_unmoved / max(s.n_tokens, 1),
            unmoved_by_level=dict(r.unmoved_by_level),
            identical_rows=r.n_identical,
        )
    return out


def structure_of_report(report: CheckpointReport, matrix: int = 0) -> dict:
    """The record's ``structure`` from a full analysis (input matrix by default): the
    values the gate's checks read (their units' ``value``)."""
    m = report.matrices[matrix]
    blocks = (C.EFFECTIVE_RANK_RATIO, C.EFFECTIVE_RANK, C.SPREAD_RELATIVE, C.MEAN_PAIRWISE_COSINE)
    return {
        **{c: VALUES[c](m) for c in blocks},
        C.RSA: rsa_by_level(m),
        "rsa_p": rsa_p_by_level(m),
        C.N_UNTRAINED: VALUES[C.N_UNTRAINED](m),
    }


def record(step: int, elapsed_s: float | None, structure: dict, **extra: object) -> dict:
    return {"step": int(step), "elapsed_s": elapsed_s, "structure": structure, **extra}


def append_record(path: Path, rec: dict) -> None:
    """Append one strict-JSON line; a reader of a half-written last line skips it."""
    from geodiag.jsonio import dumps

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(dumps(rec, indent=None) + "\n")
        f.flush()


def read_records(path: Path) -> tuple[list[dict], list[str]]:
    """(records that carry ``structure``, notes). A truncated last line (a run killed while
    writing) is skipped with a note; any other bad line is an :class:`InputError`."""
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except OSError as e:
        raise cannot_read(path, e) from None
    except UnicodeDecodeError:
        raise InputError(path, "not UTF-8 text (expected JSON lines)") from None
    out, notes = [], []
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            if i == last and not path.read_bytes().endswith(b"\n"):
                notes.append(f"{path.name}: last line {i + 1} is incomplete (run interrupted?)")
                continue
            raise InputError(path, f"line {i + 1} is not valid JSON") from None
        except RecursionError:
            raise nested_too_deeply(path, f"line {i + 1}: JSON") from None
        if not isinstance(rec, dict) or "structure" not in rec:
            continue  # a loss-only line of a training log
        if not isinstance(rec["structure"], dict) or not isinstance(rec.get("step"), int):
            raise InputError(
                path, f"line {i + 1}: needs an integer 'step' and a 'structure' object"
            )
        out.append(rec)
    if not out:
        raise InputError(path, "no line carries a 'structure' object: not a geodiag trajectory")
    return out, notes


def truncate_after(path: Path, step: int) -> float | None:
    """Drop records past ``step`` (a run resumed from an earlier checkpoint), atomically.
    Returns the last kept ``elapsed_s``, to continue the clock from."""
    if not path.is_file():
        return None
    from geodiag.atomic import atomic_write

    kept, last = [], None
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # the half-written line of a killed run
        if isinstance(rec, dict) and isinstance(rec.get("step"), int) and rec["step"] > step:
            continue
        kept.append(line + "\n")
        if isinstance(rec, dict) and _finite(rec.get("elapsed_s")) is not None:
            last = float(rec["elapsed_s"])
    atomic_write(path, kept)
    return last


@dataclass
class Trajectory:
    """One run's metrics against training step (input matrix), as the report plots them."""

    label: str
    source: str  # the JSONL file, or "checkpoints"
    steps: list[int]
    elapsed_s: list[float | None]
    effective_rank_ratio: list[float | None]
    spread_relative: list[float | None]
    mean_pairwise_cosine: list[float | None]
    rsa: dict[str, list[float | None]]
    rsa_p: dict[str, list[float | None]]
    code_accuracy: dict[str, list[float | None]] = field(default_factory=dict)
    code_accuracy_chance: dict[str, list[float | None]] = field(default_factory=dict)
    checkpoints: list[str] = field(default_factory=list)  # per step, for checkpoint series
    # Row by row (ROW_METRICS; the callback's snapshots): None where a record lacks them.
    effective_rank: list[float | None] = field(default_factory=list)
    n_untrained: list[float | None] = field(default_factory=list)
    movement: list[float | None] = field(default_factory=list)
    unmoved_fraction: list[float | None] = field(default_factory=list)
    unmoved_by_level: dict[str, list[float | None]] = field(default_factory=dict)
    grad_norm: list[float | None] = field(default_factory=list)


def _per_key(structures: list[dict], key: str) -> dict[str, list[float | None]]:
    names: list[str] = []
    for s in structures:
        table = s.get(key)
        if isinstance(table, dict):
            names += [str(k) for k in table if str(k) not in names]
    out = {}
    for name in names:
        col = []
        for s in structures:
            table = s.get(key)
            col.append(_finite(table.get(name)) if isinstance(table, dict) else None)
        out[name] = col
    return out


# The keys of records written before issue 42, when the checks took the names of the
# figures they read. Read under either name, so that older trajectories still plot.
RENAMED = {
    "spread_ratio": C.SPREAD_RELATIVE,
    "mean_cosine": C.MEAN_PAIRWISE_COSINE,
    "untrained_tokens": C.N_UNTRAINED,
}


def _current_names(structure: dict) -> dict:
    """``structure`` with the older keys (:data:`RENAMED`) under their current names."""
    out = dict(structure)
    for old, new in RENAMED.items():
        if old in out and new not in out:
            out[new] = out.pop(old)
    return out


def from_structures(
    label: str,
    source: str,
    steps: list[int],
    elapsed: list[float | None],
    structures: list[dict],
    checkpoints: list[str] | None = None,
) -> Trajectory:
    structures = [_current_names(s) for s in structures]
    return Trajectory(
        label=label,
        source=source,
        steps=steps,
        elapsed_s=elapsed,
        **{k: [_finite(s.get(k)) for s in structures] for k in METRICS},
        rsa=_per_key(structures, C.RSA),
        rsa_p=_per_key(structures, "rsa_p"),
        code_accuracy=_per_key(structures, "code_accuracy"),
        code_accuracy_chance=_per_key(structures, "code_accuracy_chance"),
        checkpoints=checkpoints or [],
        **{k: [_finite(s.get(k)) for s in structures] for k in ROW_METRICS},
        unmoved_by_level=_per_key(structures, "unmoved_by_level"),
    )


def from_jsonl(path: Path, label: str | None = None) -> tuple[Trajectory, list[str]]:
    """A series from a trajectory JSONL. Per step the last record wins (a re-measured step);
    records of the save-time gate (``"kind": "gate"``) are used only when there is nothing
    else, since they mix full and cheap measurements otherwise."""
    records, notes = read_records(path)
    snaps = [r for r in records if r.get("kind") != "gate"] or records
    by_step = {r["step"]: r for r in snaps}
    steps = sorted(by_step)
    rows = [by_step[s] for s in steps]
    name = label or (path.parent.name + "/" + path.name if path.parent.name else path.name)
    traj = from_structures(
        name,
        str(path),
        steps,
        [_finite(r.get("elapsed_s")) for r in rows],
        [r["structure"] for r in rows],
    )
    return traj, notes


def checkpoint_step(path: Path, provenance: dict) -> tuple[str, int] | None:
    """(run key, step) of a checkpoint that belongs to a series, else None."""
    path = Path(path)
    m = CHECKPOINT_DIR.match(path.name)
    if m:
        return f"run {path.parent.resolve()}", int(m.group(1))
    step = provenance.get("step")
    if isinstance(step, int) and not isinstance(step, bool):
        strategy = provenance.get("init_strategy") or provenance.get("strategy")
        return f"gti {strategy}/{provenance.get('stage')} {path.parent.resolve()}", step
    return None


def series_order(paths: list[Path], provenances: list[dict]) -> list[int]:
    """A permutation of the inputs that puts each run's checkpoints in step order, in the
    places they held (a shell glob gives checkpoint-10 before checkpoint-2)."""
    groups: dict[str, list[tuple[int, int]]] = {}
    for i, (path, prov) in enumerate(zip(paths, provenances, strict=True)):
        key = checkpoint_step(path, prov)
        if key is not None:
            groups.setdefault(key[0], []).append((key[1], i))
    order = list(range(len(paths)))
    for members in groups.values():
        slots = sorted(i for _, i in members)
        for slot, (_, i) in zip(slots, sorted(members), strict=True):
            order[slot] = i
    return order


def checkpoint_series(
    paths: list[Path], reports: list[CheckpointReport], labels: list[str]
) -> list[Trajectory]:
    """Series of >= 2 checkpoints of one run with distinct steps, each ordered by step."""
    groups: dict[str, list[tuple[int, int]]] = {}
    for i, (path, rep) in enumerate(zip(paths, reports, strict=True)):
        key = checkpoint_step(path, rep.provenance)
        if key is not None:
            groups.setdefault(key[0], []).append((key[1], i))
    out = []
    for key, members in groups.items():
        steps = [s for s, _ in members]
        if len(members) < 2 or len(set(steps)) != len(steps):
            continue
        members.sort()
        first = Path(paths[members[0][1]])
        name = first.parent.name if key.startswith("run ") else labels[members[0][1]].split(" ")[0]
        name = f"{name or first.parent} (checkpoints)"
        out.append(
            from_structures(
                name,
                "checkpoints",
                [s for s, _ in members],
                [None] * len(members),
                [structure_of_report(reports[i]) for _, i in members],
                [str(paths[i]) for _, i in members],
            )
        )
    return out


def is_trajectory_file(path: Path) -> bool:
    return Path(path).suffix == ".jsonl"


def _run_folder(path: Path) -> list[Path] | None:
    """A Trainer output folder without weights of its own: its checkpoint-N folders (by N)
    and its trajectory file, else None."""
    if (
        not path.is_dir()
        or any(path.glob("*.safetensors"))
        or (path / "pytorch_model.bin").exists()
    ):
        return None
    found = [p for p in path.iterdir() if p.is_dir() and CHECKPOINT_DIR.match(p.name)]
    found.sort(key=lambda p: int(CHECKPOINT_DIR.match(p.name).group(1)))  # type: ignore[union-attr]
    if (path / TRAJECTORY_FILENAME).is_file():
        found.append(path / TRAJECTORY_FILENAME)
    return found or None


def split_inputs(paths: Iterable[Path | str]) -> tuple[list, list[Path]]:
    """(checkpoints, trajectory JSONL files) among a report's inputs, order kept; a run
    folder (``output_dir`` with ``checkpoint-N`` folders and no weights) stands for them."""
    ckpts, trajs = [], []
    for p in paths:
        if is_remote(p):  # a URL stays a string: Path() would drop one of its slashes
            ckpts.append(p)
            continue
        for q in _run_folder(Path(p)) or [Path(p)]:
            (trajs if is_trajectory_file(q) else ckpts).append(q)
    return ckpts, trajs
