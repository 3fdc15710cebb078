"""The report model: every number and every figure's data, computed before anything is drawn.

:func:`build_report` runs the same analysis as ``geodiag metrics`` / ``check`` /
``drift`` on each checkpoint, adds what only figures need (cosine maps, histograms),
and returns one :class:`Report`. Its JSON (``geodiag.jsonio.dumps``) is the report's
``NAME.json``; the HTML only formats it. Fields whose name starts with ``_`` (the
cosine-map pixels) are figure data and stay out of the JSON.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from geodiag.analysis.checkpoint import command_line, measure_checkpoint
from geodiag.analysis.drift import deployed_read, drift_checkpoints, measure_drift
from geodiag.analysis.options import AnalyzeOptions
from geodiag.analysis.reports import CheckpointReport, DriftReport
from geodiag.analysis.rows import MatrixRows, float32_at_scale
from geodiag.errors import InputError
from geodiag.gate.checks import GateConfig, GateResult
from geodiag.gate.trajectory import (
    Trajectory,
    checkpoint_series,
    from_jsonl,
    series_order,
    split_inputs,
)
from geodiag.gate.verdict import Verdict, judge, verdict
from geodiag.io.checkpoint import Checkpoint, open_checkpoint
from geodiag.io.sources.options import ReadOptions
from geodiag.metrics.blas import blas_threads
from geodiag.metrics.cosine import cosine_matrix, level_cosine
from geodiag.metrics.geometry import row_norms
from geodiag.outputs.report.options import ReportOptions
from geodiag.outputs.report.pairs import (
    Found,
    Pair,
    find_pairs,
    labelled,
    no_pairs_note,
    with_references,
)
from geodiag.outputs.report.probe import read_probe
from geodiag.version import __version__

Progress = Callable[[str], None]


# 2: per-token findings, centered cosine maps, untrained / norm-ratio checks.
# 3: pairs only what the files or --pair say is a before (``pairs``, with why), never by order.
# 4: `gti probe`'s figures of a checkpoint whose folder holds a probe.json.
REPORT_FORMAT_VERSION = 4


@dataclass
class Histogram:
    edges: list[float]  # bins + 1, ascending
    counts: list[int]


@dataclass
class CheckpointEntry:
    label: str  # unique among the report's checkpoints
    report: CheckpointReport
    gate: GateResult
    verdict: Verdict
    row_norms: list[Histogram]  # per matrix (same order as report.matrices), shared bins per role
    # `gti probe`'s figures when a probe.json lies beside the checkpoint (its JSON, as read)
    probe: dict | None = None


@dataclass
class CosineMap:
    """The input matrix's cosine map of one checkpoint, tokens in (level, code) order."""

    label: str
    n_tokens: int
    aggregated: bool  # True: each cell is the mean cosine between two blocks of tokens
    block_size: int  # tokens per block (1 when not aggregated; a level's last block may be smaller)
    n_cells: int
    level_names: list[str]
    level_starts: list[int]  # cell index where each level starts
    _values: np.ndarray  # (n_cells, n_cells), in [-1, 1]
    # The same map of the rows minus their mean: a large common component (every row
    # = shared offset + its own part) makes every raw cosine ~1 and hides the blocks;
    # centered, the cosines compare the rows' own parts. NaN where a centered row is zero
    # (identical rows: all of it).
    _centered: np.ndarray | None = None


@dataclass
class DriftPair:
    before: str  # labels
    after: str
    reports: list[DriftReport]  # per matrix
    cosine_histograms: list[Histogram]  # per matrix, bins over [-1, 1]


@dataclass
class Report:
    title: str
    generated: str
    geodiag_version: str
    command_line: str
    seed: int
    n_permutations: int
    gate_config: GateConfig
    checkpoints: list[CheckpointEntry]
    cosine_maps: list[CosineMap]
    drift: list[DriftPair]
    notes: list[str]
    format: str = "geodiag.report"  # the JSON format's name, kept when the module moved
    # REPORT_FORMAT_VERSION: bumped when the report's contents change, so a run that
    # finds an older report beside its checkpoints writes it again.
    format_version: int = field(default_factory=lambda: REPORT_FORMAT_VERSION)
    # Metric-vs-step series: trajectory JSONL files given as inputs, and ordered
    # checkpoints of one run (checkpoint-N folders, or gti checkpoints with a step).
    trajectories: list[Trajectory] = field(default_factory=list)
    # The before -> after pairs made (geodiag.outputs.report.pairs) and why; drift has one per pair
    # whose drift could be measured.
    pairs: list[Pair] = field(default_factory=list)


def checkpoint_labels(paths: list[Path], provenances: list[dict]) -> list[str]:
    """Unique short names: sidecar ``strategy/stage``, else the folder name; clashes get more."""

    def base(path: Path, prov: dict) -> str:
        parts = [prov.get("init_strategy") or prov.get("strategy"), prov.get("stage")]
        label = "/".join(str(p) for p in parts if p not in (None, ""))
        return label or _folder(path)

    labels = [base(p, pv) for p, pv in zip(paths, provenances, strict=True)]
    for i, label in enumerate(labels):
        if labels.count(label) > 1 and label != _folder(paths[i]):
            labels = [
                f"{lb} ({_folder(p)})" if lb == label else lb
                for lb, p in zip(labels, paths, strict=True)
            ]
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label} #{seen[label]}")
    return out


def _folder(path: Path) -> str:
    path = Path(path)
    if path.suffix in (".safetensors", ".bin", ".pt", ".pth"):  # a lone weights file
        return f"{path.parent.name}/{path.stem}".lstrip("/")
    return path.name


def histogram(values: np.ndarray, edges: np.ndarray) -> Histogram:
    counts, _ = np.histogram(values, bins=edges)
    return Histogram([float(e) for e in edges], [int(c) for c in counts])


def _edges(arrays: list[np.ndarray], bins: int) -> np.ndarray:
    lo = min(float(a.min()) for a in arrays)
    hi = max(float(a.max()) for a in arrays)
    if hi - lo < 1e-12 * max(abs(hi), 1.0):  # all equal: a narrow bin around the value
        pad = max(abs(hi), 1.0) * 1e-3
        lo, hi = lo - pad, hi + pad
    return np.linspace(lo, hi, bins + 1)


def _block_index(
    level_index: np.ndarray, n_levels: int, block: int
) -> tuple[np.ndarray, list[int]]:
    """Blocks of ``block`` consecutive tokens that never straddle a level boundary."""
    out = np.empty(len(level_index), np.int64)
    starts, next_block = [], 0
    for li in range(n_levels):
        pos = np.flatnonzero(level_index == li)
        starts.append(next_block)
        out[pos] = next_block + np.arange(len(pos)) // block
        next_block += -(-len(pos) // block)
    return out, starts


def cosine_map(
    label: str, ckpt: Checkpoint, rows: np.ndarray, keep: np.ndarray, opts: ReportOptions
) -> CosineMap:
    """Token x token cosines, or block means above ``heatmap_max_tokens`` (exact, O(n d))."""
    n = len(rows)
    new = ckpt.new
    if new.level_index is not None:
        index, names = new.level_index[keep], list(new.level_names)
    else:
        index, names = np.zeros(n, np.int64), []
    mean = rows.mean(axis=0, dtype=np.float64) if n else None  # (d,)
    if n <= opts.heatmap_max_tokens:
        centered = rows - mean if n else rows  # (n, d), n small
        starts = [
            int(np.flatnonzero(index == li)[0]) for li in range(len(names)) if (index == li).any()
        ]
        return CosineMap(
            label, n, False, 1, n, names, starts, cosine_matrix(rows), cosine_matrix(centered)
        )
    block = -(-n // min(opts.heatmap_blocks, opts.heatmap_max_tokens))
    blocks, starts = _block_index(index, max(len(names), 1), block)
    n_cells = int(blocks.max()) + 1
    # The centered map from the rows and their mean: no (n, d) copy at scale.
    values = _block_means(rows, blocks, n_cells)
    centered_values = _block_means(rows, blocks, n_cells, center=mean)
    starts = starts if names else []
    return CosineMap(label, n, True, block, n_cells, names, starts, values, centered_values)


def _block_means(
    rows: np.ndarray, blocks: np.ndarray, n_cells: int, center: np.ndarray | None = None
) -> np.ndarray:
    """(n_cells, n_cells) mean cosine between blocks of ``rows`` (n, d), of ``rows -
    center`` when given; NaN if undefined."""
    lc = level_cosine(rows, blocks, [str(b) for b in range(n_cells)], center=center)
    return np.array(
        [[np.nan if v is None else v for v in row] for row in lc.matrix], dtype=np.float64
    )


class _FigureData:
    """What the figures need of one checkpoint's rows (row norms per matrix, the input
    matrix's cosine map), taken from each matrix's rows while measuring holds them."""

    def __init__(self, label: str, ckpt: Checkpoint, opts: ReportOptions) -> None:
        self.label, self.ckpt, self.opts = label, ckpt, opts
        self.norms: list[np.ndarray] = []
        self.cosine_map: CosineMap | None = None

    def __call__(self, held: MatrixRows) -> None:
        self.norms.append(row_norms(held.rows))
        if held.matrix is self.ckpt.matrices[0]:
            self.cosine_map = cosine_map(self.label, self.ckpt, held.rows, held.keep, self.opts)


def _drift(
    paths: list[Path],
    ckpts: list[Checkpoint],
    held: dict[int, list[MatrixRows]],
    a: int,
    b: int,
    read: ReadOptions,
    aopts: AnalyzeOptions,
) -> list[DriftReport]:
    """Drift of the pair (a, b) from the checkpoints opened and the rows read for the
    analysis; a deployed file that ``geodiag drift`` reads with a's sidecar is opened as
    that command opens it."""
    if deployed_read(read, ckpts[a], Path(paths[b])) is not read:
        return measure_drift(paths[a], paths[b], read, aopts)
    rows = (held.get(a, []), held.get(b, []))
    return drift_checkpoints(ckpts[a], ckpts[b], paths[a], paths[b], aopts, rows)


def _measure_all(
    paths: list[Path],
    ckpts: list[Checkpoint],
    labels: list[str],
    pairs_found: list[Found],
    aopts: AnalyzeOptions,
    opts: ReportOptions,
    say: Progress,
) -> tuple[list[CheckpointReport], list, list, dict[int, list[MatrixRows]]]:
    """(reports, row norms per matrix, cosine maps, the rows held for the pairs).

    Each checkpoint is opened once and its figure data come from the rows its analysis
    read. The new rows of a checkpoint in a pair stay held for the movement since it and
    the drift, until its last pair is measured, unless they are held as float32 (above
    FLOAT64_ROWS_MAX_ELEMENTS): holding 100,000 x 1,024 of them beside the next
    checkpoint's analysis would add their 410 MB to the report's peak, so those are read
    again a block at a time, as ``geodiag drift`` reads them."""
    paired = {i for f in pairs_found for i in (f.before, f.after)}
    reference_of = {f.after: f.before for f in pairs_found if f.movement}
    reports, norms, maps = [None] * len(paths), [None] * len(paths), [None] * len(paths)
    held: dict[int, list[MatrixRows]] = {}
    waiting = dict(reference_of)  # afters whose movement is still to measure -> their before
    for n, i in enumerate(_befores_first(len(paths), reference_of), 1):
        say(f"[{n}/{len(paths)}] analyzing {paths[i]}")
        figures = _FigureData(labels[i], ckpts[i], opts)
        keep = i in paired and not _at_scale(ckpts[i])
        before = waiting.pop(i, None)
        theirs = held.get(before)
        rows: list[MatrixRows] = []

        def each(r: MatrixRows, figures: _FigureData = figures, rows: list = rows) -> None:
            figures(r)
            rows.append(r)  # held below when the checkpoint is in a pair

        report = measure_checkpoint(ckpts[i], aopts, reference=theirs, keep_rows=keep, each=each)
        reports[i], norms[i], maps[i] = report, figures.norms, figures.cosine_map
        if theirs is not None and before not in waiting.values():
            for h in theirs:  # the sample served the movements; drift needs only the rows
                h.sample_rows = None
        if keep:
            held[i] = rows
            if i not in waiting.values():
                for h in rows:
                    h.sample_rows = None
    return reports, norms, maps, held


def _befores_first(n: int, reference_of: dict[int, int]) -> list[int]:
    """0..n-1 in order, except that a before is measured ahead of its afters (its rows
    then serve their movement), however the checkpoints were given."""
    order: list[int] = []
    seen: set[int] = set()

    def visit(i: int) -> None:
        if i not in seen:
            seen.add(i)  # before recursing: two that name each other end the walk
            if i in reference_of:
                visit(reference_of[i])
            order.append(i)

    for i in range(n):
        visit(i)
    return order


def _at_scale(ckpt: Checkpoint) -> bool:
    """The new rows are held as float32 (geodiag.analysis.rows.float32_at_scale)."""
    return any(float32_at_scale(len(ckpt.new.ids), m) for m in ckpt.matrices)


def _entries(
    labels: list[str], reports: list[CheckpointReport], norms: list, opts: ReportOptions
) -> list[CheckpointEntry]:
    """Gate, verdict and row-norm histograms (shared bins per role) of each checkpoint."""
    edges = {}
    for role in ("input", "output"):
        arrays = [
            n
            for rep, ns in zip(reports, norms, strict=True)
            for m, n in zip(rep.matrices, ns, strict=True)
            if m.role == role
        ]
        if arrays:
            edges[role] = _edges(arrays, opts.histogram_bins)
    entries = []
    for label, rep, ns in zip(labels, reports, norms, strict=True):
        gate = judge(rep, opts.gate)
        hists = [histogram(n, edges[m.role]) for m, n in zip(rep.matrices, ns, strict=True)]
        entries.append(CheckpointEntry(label, rep, gate, verdict(rep, gate), hists))
    return entries


def _drift_pairs(
    paths: list[Path],
    ckpts: list[Checkpoint],
    labels: list[str],
    pairs_found: list[Found],
    held: dict[int, list[MatrixRows]],
    read: ReadOptions,
    aopts: AnalyzeOptions,
    bins: int,
    say: Progress,
) -> tuple[list[DriftPair], list[str]]:
    """(the drift of each pair, notes on the pairs skipped); rows are let go of once no
    later pair needs them."""
    notes, pairs = [], []
    cos_edges = np.linspace(-1.0, 1.0, bins + 1)
    for j, (a, b) in enumerate((f.before, f.after) for f in pairs_found):
        say(f"drift {labels[a]} -> {labels[b]}")
        try:
            drifts = _drift(paths, ckpts, held, a, b, read, aopts)
        except InputError as e:
            notes.append(f"drift {labels[a]} -> {labels[b]} skipped: {e}")
            continue
        finally:
            for i in (a, b):  # let go of rows no later pair needs
                if all(i not in (f.before, f.after) for f in pairs_found[j + 1 :]):
                    held.pop(i, None)
        hists = [
            histogram(np.array([c for c in d.drift.per_token_cosine if c is not None]), cos_edges)
            for d in drifts
        ]
        pairs.append(DriftPair(labels[a], labels[b], drifts, hists))
    return pairs, notes


def build_report(
    paths: list[Path],
    read: ReadOptions | None = None,
    opts: ReportOptions | None = None,
    progress: Progress | None = None,
) -> Report:
    """Analyze every checkpoint, gate it, explain it, and pair checkpoints for drift."""
    # Single-threaded BLAS for the cosine maps too, as in measure_checkpoint(): see geodiag.metrics.blas.
    with blas_threads(1):
        return _build_report(paths, read, opts, progress)


def _build_report(
    paths: list[Path],
    read: ReadOptions | None,
    opts: ReportOptions | None,
    progress: Progress | None,
) -> Report:
    read = read or ReadOptions()
    opts = opts or ReportOptions()  # its bounds were checked when it was built
    say = progress or (lambda _msg: None)
    if not paths:
        raise InputError("CKPT", "give at least one checkpoint")
    paths, trajectory_files = split_inputs(paths)
    trajectories, traj_notes = [], []
    for f in trajectory_files:
        say(f"reading trajectory {f}")
        traj, found = from_jsonl(f)
        trajectories.append(traj)
        traj_notes += found
    aopts = AnalyzeOptions(
        seed=opts.seed,
        n_permutations=opts.n_permutations,
        neighbors_k=opts.neighbors_k,
    )
    ckpts = []
    alone = replace(read, reference=None, auto_reference=False)  # references: below, reused
    for i, path in enumerate(paths, 1):
        say(f"[{i}/{len(paths)}] reading {path}")
        ckpts.append(open_checkpoint(path, alone))
    with_references(ckpts, read)
    provenances = [c.provenance for c in ckpts]
    order = series_order(list(paths), provenances)
    paths, ckpts = [paths[i] for i in order], [ckpts[i] for i in order]
    labels = checkpoint_labels(list(paths), [provenances[i] for i in order])
    pairs_found, pair_notes = find_pairs(list(paths), ckpts, labels, opts.pairs)
    # The after of a pair is measured from its before (the checkpoint the report holds):
    # the rows that barely moved since are untrained, the movement plot shows distance from it.
    for f in pairs_found:  # a reference from the files is the before already, with its note
        if f.movement and ckpts[f.after].reference is not ckpts[f.before]:
            ckpts[f.after].use_reference(ckpts[f.before], f.why)
    reports, norms, maps, held = _measure_all(paths, ckpts, labels, pairs_found, aopts, opts, say)
    trajectories += checkpoint_series(list(paths), reports, labels)

    entries = _entries(labels, reports, norms, opts)
    pairs, drift_notes = _drift_pairs(
        paths, ckpts, labels, pairs_found, held, read, aopts, opts.histogram_bins, say
    )
    probe_notes = []
    for entry, path in zip(entries, paths, strict=True):
        entry.probe, why = read_probe(path)
        probe_notes += [why] if why else []
    notes = traj_notes + pair_notes + drift_notes + probe_notes
    if not pairs_found and len(ckpts) > 1:
        notes.insert(0, no_pairs_note(len(ckpts)))
    return Report(
        title=opts.title,
        generated=opts.generated or dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
        geodiag_version=__version__,
        command_line=opts.command_line or command_line(),
        seed=opts.seed,
        n_permutations=opts.n_permutations,
        gate_config=opts.gate,
        checkpoints=entries,
        cosine_maps=maps,
        drift=pairs,
        notes=notes,
        trajectories=trajectories,
        pairs=labelled(pairs_found, labels),
    )
