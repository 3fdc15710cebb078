"""Intervals for the study's RSA figures: a two-way bootstrap over seeds and codes.

``geometry.json`` holds one RSA per (run, milestone, level) with a permutation p-value:
it says whether one checkpoint's rows share the codebook's structure, not how sure we
are of a *difference* between arms, or between a run's init and its end. Here the two
sources of variation are resampled together, as for Recall (``gti.evaluate.stats``):

- seeds, paired across arms (seed k of one arm with seed k of the other: same SFT
  example order) and across stages (a run's init with its own final checkpoint);
- the codes of a level, which are the items of its RSA and the same for every
  checkpoint (all arms share one set of semantic IDs), drawn once per replicate and
  applied to every checkpoint alike.

A code drawn twice brings its pairs with every other drawn code twice; the pairs
between two copies of one code are left out (their dissimilarity is 0 by
construction, not a measurement): the bootstrap over conditions of RSA (Nili et al.
2014; rsatoolbox's ``bootstrap_sample_pattern``). A replicate is then the Spearman
correlation over that multiset of pairs, computed without building it: pair (i, j)
of the full triangle occurs ``m_i m_j`` times (``m`` = how often each code was drawn),
so the ranks are weighted cumulative counts over one sort of the triangle made once
per checkpoint (``weighted_ranks``), and the correlation is a weighted Pearson
correlation of those ranks. ``tests/gti/study/test_geometry_intervals.py`` checks it
against ``scipy.stats.spearmanr`` on the explicitly expanded multiset.

The interval is conservative rather than tight: on null data (two arms of pure noise,
24 codes, 3 seeds, 60 data sets) the 95% interval of the difference covered 0 in all
60. With 3 seeds the seed factor is resampled from three values, as for Recall.

Weights are read from the study's work folder (``<work>/<arm>-seed<k>/sft`` and
``<work>/init/<init>-seed<k>``), so this runs where the runs ran; what it writes,
``<reports>/geometry_intervals.json``, is small and committed, and
``gti study assemble`` adds its table to ``results.md``.
"""

from __future__ import annotations

import json
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from geodiag.errors import InputError

FORMAT = "gti.study.geometry_intervals"
STAGES = ("init", "final")
COMPARISONS = ("mean", "random", "description-mean")  # gti - each, final checkpoints


@dataclass(frozen=True)
class SortedPairs:
    """The upper triangle (i < j) of one dissimilarity matrix, sorted once."""

    order: np.ndarray  # (N,) positions of the triangle in ascending order
    group: np.ndarray  # (N,) tie group of each sorted position (equal values share one)
    n_groups: int


def sort_pairs(values: np.ndarray) -> SortedPairs:
    values = np.asarray(values, dtype=np.float64)
    order = np.argsort(values, kind="stable")
    v = values[order]
    new_group = np.r_[True, v[1:] != v[:-1]] if len(v) else np.zeros(0, dtype=bool)
    group = np.cumsum(new_group) - 1
    return SortedPairs(order, group, int(group[-1]) + 1 if len(group) else 0)


def weighted_ranks(pairs: SortedPairs, weights: np.ndarray) -> np.ndarray:
    """Average ranks (1-based) of the triangle's values in the multiset where pair p
    occurs ``weights[p]`` times (scipy's ``rankdata`` on that multiset, one value per
    pair). Pairs of weight 0 get a rank too; it does not enter any weighted sum."""
    w = weights[pairs.order]
    per_group = np.bincount(pairs.group, weights=w, minlength=pairs.n_groups)
    before = np.cumsum(per_group) - per_group
    ranks = np.empty(len(w))
    ranks[pairs.order] = (before + (per_group + 1) / 2)[pairs.group]
    return ranks


def weighted_spearman(ra: np.ndarray, rb: np.ndarray, weights: np.ndarray) -> float | None:
    """Pearson correlation of the weighted ranks ``ra``, ``rb`` (``weighted_ranks``)
    under multiplicities ``weights``: Spearman's rho of the expanded multiset. None when
    either side is constant on the pairs that occur (the correlation is undefined)."""
    total = float(weights.sum())
    if total < 2:
        return None
    mid = (total + 1) / 2  # the mean of average ranks, ties or not
    da, db = ra - mid, rb - mid
    wa = weights * da
    va = float(np.einsum("i,i->", wa, da))
    vb = float(np.einsum("i,i->", weights * db, db))
    if va <= 0 or vb <= 0:
        return None
    return float(np.clip(np.einsum("i,i->", wa, db) / np.sqrt(va * vb), -1.0, 1.0))


def code_weights(draw: np.ndarray, n: int, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Multiplicity of each triangle pair (rows[p], cols[p]) in a bootstrap draw of codes:
    m_i m_j, with m the draw's counts; copies of one code never pair with each other."""
    m = np.bincount(draw, minlength=n).astype(np.float64)
    return m[rows] * m[cols]


def _triangle(x: np.ndarray) -> np.ndarray:
    from geodiag.metrics.rsa import dissimilarity

    d = dissimilarity(x)
    rows, cols = np.triu_indices(len(x), k=1)
    return d[rows, cols]


@dataclass
class Cell:
    """One checkpoint's rows, per level, ready for resampling."""

    arm: str
    seed: int
    stage: str  # "init" | "final"
    path: Path
    pairs: dict[str, SortedPairs]  # level -> sorted triangle (levels with RSA defined)


def _read(path: Path) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(rows per level, codebook per level) of a checkpoint's new tokens, paired as
    ``geodiag.analysis.checkpoint`` pairs them (rows in (level, code) order, codebook rows by code)."""
    from geodiag.analysis.rows import new_rows
    from geodiag.io.checkpoint import open_checkpoint

    ckpt = open_checkpoint(path)
    matrix = ckpt.matrices[0]
    rows, _ = new_rows(ckpt, matrix)
    if ckpt.new.level_index is None:
        raise InputError(path, "the new tokens have no levels: no per-level RSA to resample")
    out, books = {}, {}
    for li, name in enumerate(ckpt.new.level_names):
        book = ckpt.codebooks.get(name)
        if book is None:
            continue  # e.g. a de-duplication level: no codebook, no RSA (as in geodiag)
        out[name] = rows[ckpt.new.level_index == li]
        books[name] = np.asarray(book, dtype=np.float64)
        if len(out[name]) != len(books[name]):
            raise InputError(
                path,
                f"level '{name}' has {len(out[name])} token rows but {len(books[name])} "
                "codebook vectors: rows and codes do not pair",
            )
    if not books:
        raise InputError(path, ckpt.codebooks_note or "no level has a codebook: no RSA")
    return out, books


def _defined(x: np.ndarray) -> bool:
    return not bool(np.all(x == x[:1]))


def load_cells(
    checkpoints: dict[tuple[str, int, str], Path],
) -> tuple[list[Cell], dict[str, SortedPairs], dict[str, int]]:
    """Read every checkpoint; (cells, sorted codebook triangles, codes per level).

    Every checkpoint must carry the same codebooks (one set of semantic IDs for the
    whole study); a level whose rows are all identical (mean init) has no RSA and is
    left out of that cell.
    """
    cells, books, first = [], None, None
    for (arm, seed, stage), path in sorted(checkpoints.items(), key=lambda kv: str(kv[0])):
        levels, b = _read(Path(path))
        if books is None:
            books, first = b, path
        elif list(b) != list(books) or any(not np.array_equal(b[k], books[k]) for k in b):
            raise InputError(
                path, f"its codebooks differ from those of {first}: not one study's SIDs"
            )
        pairs = {lv: sort_pairs(_triangle(x)) for lv, x in levels.items() if _defined(x)}
        cells.append(Cell(arm, seed, stage, Path(path), pairs))
    if books is None:
        raise InputError("geometry intervals", "no checkpoints to measure")
    book_pairs = {lv: sort_pairs(_triangle(x)) for lv, x in books.items()}
    sizes = {lv: len(x) for lv, x in books.items()}
    return cells, book_pairs, sizes


def replicates(
    cells: list[Cell],
    books: dict[str, SortedPairs],
    sizes: dict[str, int],
    *,
    n_resamples: int,
    seed: int,
    progress: bool = False,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(point, reps) per level: point[lv] (n_cells,) is each cell's RSA on all codes
    (NaN where undefined); reps[lv] (n_resamples, n_cells) the same after replicate b's
    draw of codes, one draw per level and replicate shared by every cell."""
    rng = np.random.default_rng(seed)
    point, reps, tri = {}, {}, {}
    for lv, n in sizes.items():
        rows, cols = tri[lv] = np.triu_indices(n, k=1)
        ones = np.ones(len(rows))
        rb = weighted_ranks(books[lv], ones)
        point[lv] = np.array(
            [
                np.nan
                if lv not in c.pairs
                else _or_nan(weighted_spearman(weighted_ranks(c.pairs[lv], ones), rb, ones))
                for c in cells
            ]
        )
        reps[lv] = np.full((n_resamples, len(cells)), np.nan)
    it = range(n_resamples)
    if progress:
        from tqdm import tqdm

        it = tqdm(it, desc="RSA bootstrap", unit="replicate")
    for b in it:
        for lv, n in sizes.items():
            w = code_weights(rng.integers(0, n, size=n), n, *tri[lv])
            rb = weighted_ranks(books[lv], w)
            for j, c in enumerate(cells):
                if lv in c.pairs:
                    rho = weighted_spearman(weighted_ranks(c.pairs[lv], w), rb, w)
                    reps[lv][b, j] = _or_nan(rho)
    return point, reps


def _or_nan(x: float | None) -> float:
    return np.nan if x is None else x


def _summary(point: np.ndarray, reps: np.ndarray, draws: np.ndarray, level: float) -> dict:
    """Estimate (mean over seeds of ``point`` (S,)) and percentile interval of the
    replicates (R, S) averaged over each replicate's seed draw ``draws`` (R, S)."""
    boot = reps[np.arange(len(reps))[:, None], draws].mean(axis=1)
    ok = np.isfinite(boot)
    alpha = (1 - level) / 2
    low = high = None  # every replicate undefined: no interval
    if ok.any():
        low, high = (float(q) for q in np.percentile(boot[ok], [100 * alpha, 100 * (1 - alpha)]))
    return {
        "estimate": float(np.mean(point)),
        "low": low,
        "high": high,
        "n_seeds": int(len(point)),
        "n_undefined_replicates": int((~ok).sum()),
    }


def intervals(
    checkpoints: dict[tuple[str, int, str], Path],
    *,
    n_resamples: int = 2_000,
    seed: int = 0,
    level: float = 0.95,
    progress: bool = False,
) -> dict[str, object]:
    """RSA per (arm, stage, level) with intervals, paired differences gti - other arm
    (final checkpoints) and final - init per arm; a strict-JSON dict."""
    if n_resamples < 1:
        raise InputError("--resamples", f"must be >= 1, got {n_resamples}")
    start = time.perf_counter()
    cells, books, sizes = load_cells(checkpoints)
    doc = summarize_cells(
        cells, books, sizes, n_resamples=n_resamples, seed=seed, level=level, progress=progress
    )
    from gti.study.run import init_digest

    doc["checkpoints"] = [
        {"arm": c.arm, "seed": c.seed, "stage": c.stage, "path": str(c.path)}
        | ({"init_digest": init_digest(c.path)} if c.stage == "init" else {})
        for c in cells
    ]
    doc["seconds"] = round(time.perf_counter() - start, 1)
    return doc


def summarize_cells(
    cells: list[Cell],
    books: dict[str, SortedPairs],
    sizes: dict[str, int],
    *,
    n_resamples: int,
    seed: int,
    level: float = 0.95,
    progress: bool = False,
) -> dict[str, object]:
    """The document of ``intervals`` from cells already read."""
    point, reps = replicates(
        cells, books, sizes, n_resamples=n_resamples, seed=seed, progress=progress
    )
    index = {(c.arm, c.seed, c.stage): j for j, c in enumerate(cells)}
    boot = Bootstrap(point, reps, index, seed=seed, level=level)
    arms = sorted({c.arm for c in cells}, key=lambda a: (a != "gti", a))
    rsa = [
        row
        for arm in arms
        for stage in STAGES
        for row in boot.rows((arm, stage), None, f"{arm} {stage}", {"arm": arm, "stage": stage})
    ]
    through = [
        row
        for arm in arms
        for row in boot.rows(
            (arm, "final"),
            (arm, "init"),
            f"{arm} final - init",
            {"arm": arm, "comparison": "final - init"},
        )
    ]
    paired = [
        row
        for other in COMPARISONS
        for row in boot.rows(
            ("gti", "final"),
            (other, "final"),
            f"gti - {other}",
            {"comparison": f"gti - {other}", "stage": "final"},
        )
    ]
    return {
        "format": FORMAT,
        "format_version": 1,
        "statistic": "Spearman RSA per level (token-row vs codebook cosine dissimilarities)",
        "interval": f"{level:.0%} percentile, two-way bootstrap over seeds and codes "
        "(pairs between copies of one code left out)",
        "level": level,
        "n_resamples": n_resamples,
        "bootstrap_seed": seed,
        "codes_per_level": sizes,
        "rsa": rsa,
        "paired": paired,
        "through_sft": through,
    }


@dataclass
class Bootstrap:
    """Each cell's RSA and its replicates (:func:`replicates`), summarized per entry."""

    point: dict[str, np.ndarray]  # level -> (n_cells,)
    reps: dict[str, np.ndarray]  # level -> (n_resamples, n_cells)
    index: dict[tuple[str, int, str], int]  # (arm, seed, stage) -> cell
    seed: int
    level: float

    def summary(self, cols_a: list[int], cols_b: list[int] | None, lv: str, label: str) -> dict:
        """Cells ``cols_a`` (one per seed), minus cells ``cols_b`` when given, at level
        ``lv``: estimate, interval and the per-seed values."""
        p, r = self.point[lv][cols_a], self.reps[lv][:, cols_a]
        if cols_b is not None:
            p, r = p - self.point[lv][cols_b], r - self.reps[lv][:, cols_b]
        # Seed draws from a stream of their own per entry: an entry's interval does not
        # depend on which other runs are present (the code draws never do).
        rng = np.random.default_rng([self.seed, 1, zlib.crc32(f"{label} {lv}".encode())])
        draws = rng.integers(0, len(cols_a), size=(len(r), len(cols_a)))
        out = _summary(p, r, draws, self.level)
        out["per_seed"] = [None if not np.isfinite(x) else float(x) for x in p]
        return out

    def rows(
        self,
        a: tuple[str, str],
        b: tuple[str, str] | None,
        label: str,
        head: dict[str, str],
    ) -> list[dict]:
        """One entry per level for (arm, stage) ``a``, or ``a`` minus ``b``, over the seeds
        that have every checkpoint; a level is left out where a cell's RSA is undefined
        (mean init). Each entry is ``head``, the level, the seeds and the summary; ``label``
        names the entry's stream of seed draws."""
        index, keys = self.index, [a] if b is None else [a, b]
        seeds = sorted(
            s
            for (arm, s, stage) in index
            if (arm, stage) == a and all((k[0], s, k[1]) in index for k in keys)
        )
        cols_a = [index[(a[0], s, a[1])] for s in seeds]
        cols_b = None if b is None else [index[(b[0], s, b[1])] for s in seeds]
        out = []
        for lv in self.point:
            if not seeds or not np.isfinite(self.point[lv][cols_a + (cols_b or [])]).all():
                continue
            out.append(
                {**head, "level": lv, "seeds": seeds, **self.summary(cols_a, cols_b, lv, label)}
            )
        return out


def study_checkpoints(cfg) -> tuple[dict[tuple[str, int, str], Path], list[str]]:
    """The init and final checkpoints of every complete run of ``cfg`` whose weights are
    in its work folder; (checkpoints, notes on complete runs left out)."""
    from gti.experiment.layout import Files, run_name, study_paths

    out, notes = {}, []
    for arm, seed in cfg.ordered_runs():
        paths = study_paths(cfg.work, cfg.reports, arm, seed)
        run = paths.result / Files.RUN
        try:
            complete = json.loads(run.read_text()).get("status") == "complete"
        except (OSError, ValueError):
            complete = False
        if not complete:
            continue
        init, final = paths.init, paths.sft
        missing = [p for p in (init, final) if not (p / "model.safetensors").is_file()]
        if missing:
            notes.append(f"{run_name(arm, seed)}: complete, but no weights at {missing[0]}")
            continue
        out[(arm, seed, "init")] = init
        out[(arm, seed, "final")] = final
    return out, notes


def check_against_runs(doc: dict, runs_root: Path) -> list[str]:
    """Each checkpoint's full-sample RSA (the interval file's ``per_seed``) against the
    value its run's geometry.json recorded; returns the mismatches (none expected: both
    are geodiag's Spearman over the same rows).

    Where the file names the init build it measured (``init_digest``) and the run's last
    milestone records the build it descends from, the two must be the same build. An
    init rebuilt after the run's step 0 was recorded (geometry.json's step 0 names another
    build, or none) has no recorded RSA of its own: it is checked by that digest alone."""
    from gti.experiment.layout import Files, run_name

    builds = {
        (c["arm"], c["seed"]): c["init_digest"]
        for c in doc.get("checkpoints", [])
        if c.get("stage") == "init" and c.get("init_digest")
    }
    problems = []
    for row in doc.get("rsa", []):
        for s, value in zip(row["seeds"], row["per_seed"], strict=True):
            geo_path = Path(runs_root) / run_name(row["arm"], s) / Files.GEOMETRY
            try:
                geo = json.loads(geo_path.read_text())
            except (OSError, ValueError):
                problems.append(f"{geo_path}: unreadable")
                continue
            last = max(geo, key=int)
            built, descends = builds.get((row["arm"], s)), geo[last].get("init_digest")
            if row["stage"] == "init" and built and descends:
                if built != descends:
                    problems.append(
                        f"{row['arm']} seed {s} init: build {built} here, but step {last} "
                        f"descends from {descends} in {geo_path}"
                    )
                    continue
                if rebuilt_after_step0(geo, built):
                    continue  # no recorded RSA of its own: checked by digest
            step = "0" if row["stage"] == "init" else last
            want = geo[step]["levels"][row["level"]]["rsa"]
            if want is None or abs(want - value) > 1e-9:
                problems.append(
                    f"{row['arm']} seed {s} {row['stage']} level {row['level']}: "
                    f"{value} here, {want} in {geo_path}"
                )
    return problems


def rebuilt_after_step0(geometry: dict, digest: str) -> bool:
    """Whether the init build ``digest`` is the one the run's last milestone descends from
    (its geometry.json), while its step 0 was recorded from another build or before builds
    were recorded: the init was rebuilt after step 0, whose figures are not this build's."""
    last = geometry[max(geometry, key=int)]
    return last.get("init_digest") == digest and geometry.get("0", {}).get("init_digest") != digest


def rebuilt_inits(doc: dict, runs_root: Path) -> list[str]:
    """The runs whose init in the file is a build other than the one their step 0 was
    recorded from (see :func:`check_against_runs`), as lines for results.md."""
    from gti.experiment.layout import Files, run_name

    out = []
    for c in doc.get("checkpoints", []):
        if c.get("stage") != "init" or not c.get("init_digest"):
            continue
        try:
            geo = json.loads(
                (Path(runs_root) / run_name(c["arm"], c["seed"]) / Files.GEOMETRY).read_text()
            )
        except (OSError, ValueError):
            continue
        if rebuilt_after_step0(geo, c["init_digest"]):
            out.append(
                f"{c['arm']} seed {c['seed']}: its init here is the build "
                f"{c['init_digest']} that its last milestone descends from; its step 0 in "
                "geometry.json names another build or none (recorded before builds were), "
                "so its init RSA is this build's"
            )
    return out


def to_markdown(
    doc: dict, problems: list[str], notes: list[str] | tuple[str, ...] = ()
) -> list[str]:
    """The results.md section for a geometry_intervals.json document."""

    def ci(r: dict) -> str:
        if r["low"] is None:
            return f"{r['estimate']:+.3f} [no interval]"
        return f"{r['estimate']:+.3f} [{r['low']:+.3f}, {r['high']:+.3f}]"

    def seeds(r: dict) -> str:
        return ", ".join("-" if x is None else f"{x:+.3f}" for x in r["per_seed"])

    lines = [
        "## RSA with intervals (two-way bootstrap over seeds and codes)",
        "",
        f"From `geometry_intervals.json` (`gti study geometry-intervals`, "
        f"{doc['n_resamples']} resamples, seed {doc['bootstrap_seed']}; codes per level: "
        + ", ".join(f"{lv} {n}" for lv, n in doc["codes_per_level"].items())
        + f"): {doc['interval']}. Seeds are paired across arms and stages. The interval "
        "is conservative (on null data it covered 0 in 60 of 60 sets; "
        "gti/study/geometry_intervals.py).",
        "",
    ]
    if notes:
        lines += [f"- {n}" for n in notes] + [""]
    if problems:
        lines += ["**Does not match the runs' geometry.json** (rerun the command):", ""]
        lines += [f"- {p}" for p in problems] + [""]
    lines += [
        "| arm | stage | level | seeds | RSA [95%] | per seed |",
        "|---|---|---|---:|---:|---|",
    ]
    for r in doc["rsa"]:
        lines.append(
            f"| {r['arm']} | {r['stage']} | {r['level']} | {r['n_seeds']} | {ci(r)} | {seeds(r)} |"
        )
    lines += [
        "",
        "| difference | level | seeds | RSA difference [95%] | per seed |",
        "|---|---|---:|---:|---|",
    ]
    for r in doc["paired"]:
        lines.append(
            f"| {r['comparison']} (final) | {r['level']} | {r['n_seeds']} | {ci(r)} | {seeds(r)} |"
        )
    for r in doc["through_sft"]:
        lines.append(
            f"| {r['arm']}: {r['comparison']} | {r['level']} | {r['n_seeds']} | "
            f"{ci(r)} | {seeds(r)} |"
        )
    lines.append("")
    return lines
