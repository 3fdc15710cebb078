"""The callback's snapshots: the new rows' cheap figures at one step, and what they alarm on.

:func:`measure_matrices` takes a snapshot of every matrix of an opened model
(:func:`geodiag.metrics.snapshot.snapshot`); the first one of a run fixes the reference
of the row-by-row findings (:class:`FirstRows`). :func:`collapse_of` and
:func:`untrained_why` say what the alarms say; :func:`logs_of` is what reaches the
Trainer's log.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from geodiag.analysis.options import AnalyzeOptions
from geodiag.analysis.rows import reference_rows
from geodiag.errors import InputError
from geodiag.gate.checks import CheckName, GateConfig, collapse_checks
from geodiag.gate.trajectory import structure_of_snapshot
from geodiag.metrics.snapshot import snapshot
from geodiag.metrics.untrained import TOLERANCE, TOLERANCE_RULE, vocabulary_stats

# The structure's numbers logged as geodiag/<key> (RSA per level besides).
LOGGED = (
    CheckName.EFFECTIVE_RANK_RATIO,
    CheckName.SPREAD_RELATIVE,
    CheckName.MEAN_PAIRWISE_COSINE,
    CheckName.N_UNTRAINED,
    "unmoved_fraction",
    "movement",
    "grad_norm",
)


@dataclass
class FirstRows:
    """What the first snapshot fixes for the row-by-row findings of one matrix."""

    first: np.ndarray  # (n, d) the new rows then
    scale: float  # the vocabulary's spread (or the new rows' own, without a vocabulary)
    tolerance: float  # TOLERANCE x scale
    rule: str


@dataclass
class Collapse:
    collapsed: bool
    why: list[str]


def collapse_of(structure: dict, gate: GateConfig) -> Collapse:
    """Which of the gate's collapse checks a snapshot fails, with the gate's messages
    (:func:`geodiag.gate.checks.collapse_checks`; undefined fails a floor, as in the gate)."""
    failed = collapse_checks(structure, gate)
    return Collapse(bool(failed), [c.message for c in failed])


def first_rows(ckpt, matrix, rows: np.ndarray) -> FirstRows:
    """The reference of the row-by-row findings: the rows now, and the gate's tolerance
    (geodiag.analysis.findings): TOLERANCE x the vocabulary's spread, exact over all
    original rows, or x the new rows' own spread without a vocabulary."""
    from geodiag.analysis.findings import MIN_REFERENCE_ROWS
    from geodiag.io.checkpoint import check_original_rows
    from geodiag.metrics.geometry import spread

    vocab = vocabulary_stats(block for _, block in ckpt.iter_original(matrix))
    if vocab is not None:  # NaN/Inf original rows: every snapshot is skipped, naming them
        check_original_rows(ckpt, matrix, vocab.nonfinite_rows, allow_nonfinite=False)
    scale, rule = (vocab.spread, TOLERANCE_RULE) if vocab is not None else (0.0, "")
    if vocab is None or vocab.n_rows < MIN_REFERENCE_ROWS or scale <= 0:
        scale = spread(rows)
        rule = f"{TOLERANCE:g} x the new rows' own spread (no vocabulary)"
    return FirstRows(rows.copy(), float(scale), TOLERANCE * float(scale), rule)


def _rsa_inputs(ckpt, rows: np.ndarray, rsa_levels: list[str] | None) -> dict:
    """{level: (its new rows, its codebook vectors)} of the levels whose RSA is taken
    (default: the first, coarsest), where a codebook is known."""
    levels = {}
    names = rsa_levels if rsa_levels is not None else ckpt.new.level_names[:1]
    for name in names:
        if name in ckpt.codebooks and ckpt.new.level_index is not None:
            li = ckpt.new.level_names.index(name)
            levels[name] = (rows[ckpt.new.level_index == li], ckpt.codebooks[name])
    return levels


def measure_matrices(
    ckpt,
    fixed_rows: dict[str, FirstRows],
    *,
    rsa_levels: list[str] | None,
    rsa_sample: int,
    rsa_permutations: int,
    seed: int,
) -> dict[str, tuple[dict, np.ndarray, dict[int, str]]]:
    """{role: (structure, the untrained tokens' ids ascending, {id: name} of the first
    MAX_NAMED)} of every matrix of ``ckpt``. ``fixed_rows`` (role -> FirstRows) gains each matrix not in it
    yet: this snapshot is its first. Raises InputError on NaN/Inf rows."""
    from geodiag.io.vocabulary.references import trained_init

    opts = AnalyzeOptions(seed=seed)
    # A grounded init's rows were trained: one that has not moved since is not untrained,
    # as the gate judges a row that barely moved since such a reference.
    grounded = trained_init(ckpt) is not None
    out = {}
    for matrix in ckpt.matrices:
        rows = ckpt.read_rows(matrix, ckpt.new.ids)
        if not np.isfinite(rows).all():
            raise InputError("<model>", f"new rows of the {matrix.role} matrix hold NaN/Inf")
        reference = reference_rows(ckpt, matrix, opts, len(rows))
        levels = _rsa_inputs(ckpt, rows, rsa_levels)
        fixed = fixed_rows.get(matrix.role)
        first = None if fixed is None else fixed.first  # None: this is the first
        if fixed is None:
            fixed = fixed_rows[matrix.role] = first_rows(ckpt, matrix, rows)
        index = ckpt.new.level_index
        snap = snapshot(
            rows,
            reference,
            levels,
            rsa_max_items=rsa_sample,
            n_permutations=rsa_permutations,
            seed=seed,
            first=first,
            scale=fixed.scale,
            tolerance=fixed.tolerance,
            level_of=None if index is None else (index, list(ckpt.new.level_names)),
            unmoved_untrained=not grounded,
        )
        assert snap.rows is not None
        ids = np.sort(ckpt.new.ids[snap.rows.untrained])
        names = {int(i): ckpt.token(int(i)) for i in ids[:MAX_NAMED]}
        out[matrix.role] = (structure_of_snapshot(snap), ids, names)
    return out


# Untrained tokens whose names a snapshot keeps (the alarm names the most used of them).
MAX_NAMED = 1000
# The training data the callback counts: the whole dataset when it holds at most this
# many examples, else its first this many (a zero count then says nothing).
USAGE_EXAMPLES = 100_000


@dataclass
class DataUsage:
    """How often the training dataset feeds each token id (``input_ids``)."""

    counts: np.ndarray  # (max id + 1,) int64
    n_examples: int
    complete: bool  # every example counted: a zero means the data never feeds it

    def of(self, ids: np.ndarray) -> np.ndarray:
        inside = ids < len(self.counts)
        out = np.zeros(len(ids), np.int64)
        out[inside] = self.counts[ids[inside]]
        return out


def dataset_usage(dataset, limit: int = USAGE_EXAMPLES) -> DataUsage | None:
    """The token counts of a training dataset whose examples hold ``input_ids`` (a
    tokenized ``datasets.Dataset``, a list of dicts, a torch Dataset of dicts); None for
    any other kind (an iterable dataset, raw text): nothing is guessed."""
    try:
        n = len(dataset)
    except TypeError:
        return None
    counts = np.zeros(0, np.int64)
    seen = min(n, limit)
    for i in range(seen):
        try:
            ids = dataset[i]["input_ids"]
        except (KeyError, TypeError, IndexError):
            return None
        a = np.asarray(ids.detach().cpu() if hasattr(ids, "detach") else ids).ravel()
        if not a.size:
            continue
        if not np.issubdtype(a.dtype, np.integer) or a.min() < 0:
            a = a[a >= 0].astype(np.int64)  # label padding (-100) is no token
        found = np.bincount(a.astype(np.int64))
        if len(found) > len(counts):
            counts = np.concatenate([counts, np.zeros(len(found) - len(counts), np.int64)])
        counts[: len(found)] += found
    return DataUsage(counts, seen, seen == n)


def untrained_why(s: dict, fixed: FirstRows) -> str:
    """How the untrained rows of structure ``s`` were found, and the tolerance's rule."""
    parts = []
    if s.get("n_unmoved"):
        parts.append(f"{s['n_unmoved']} not moved since the first snapshot")
    if s.get("identical_rows"):
        parts.append(f"{s['identical_rows']} in a group of identical rows")
    return "; ".join(parts) + f"; tolerance {fixed.tolerance:.3g} = {fixed.rule}"


def logs_of(structures: dict[str, dict], prefix: str) -> dict[str, float]:
    """The Trainer log entries of {role: structure}: ``<prefix><key>`` for the input
    matrix, ``<prefix><role>/<key>`` for an untied head; RSA as ``rsa_<level>``."""
    logs = {}
    for role, s in structures.items():
        pre = prefix + ("" if role == "input" else f"{role}/")
        for key in LOGGED:
            if s.get(key) is not None:
                logs[pre + key] = float(s[key])
        for level, v in s[CheckName.RSA].items():
            if v is not None:
                logs[f"{pre}rsa_{level}"] = float(v)
    return logs


def empty_structure() -> dict:
    """The structure of a skipped snapshot."""
    return {
        CheckName.EFFECTIVE_RANK_RATIO: None,
        CheckName.SPREAD_RELATIVE: None,
        CheckName.MEAN_PAIRWISE_COSINE: None,
        CheckName.RSA: {},
        "rsa_p": {},
    }
