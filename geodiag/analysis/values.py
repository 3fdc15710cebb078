"""The gate's checks by name, and the value each one reads off a :class:`MatrixReport`.

One enumeration of the names that every user imports (the gate's table and its verdicts,
the trajectory records, the report, the Trainer callback), and one map from a check to its
value, which the gate's readers (:mod:`geodiag.gate.checks`) and a trajectory's record of a
full analysis (:func:`geodiag.analysis.trajectory.structure_of_report`) both read. Here,
below the gate, so that the analysis can use it too.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

from geodiag.analysis.findings import UNTRAINED_USES_TO_FAIL
from geodiag.analysis.reports import MatrixReport


class CheckName(StrEnum):
    """A check's name: its results carry it, its ``GateConfig`` field is ``min_`` or
    ``max_`` + it (or names it with ``check=``: three flags kept their older names), and a
    trajectory record's ``structure`` keys its value by it. The name is the figure's own
    (``spread_relative``, ``mean_pairwise_cosine``, ``n_untrained``), as the metrics JSON
    and the terminal tables name it."""

    EFFECTIVE_RANK_RATIO = "effective_rank_ratio"
    EFFECTIVE_RANK = "effective_rank"
    SPREAD_RELATIVE = "spread_relative"
    MEAN_PAIRWISE_COSINE = "mean_pairwise_cosine"
    N_UNTRAINED = "n_untrained"
    NORM_RATIO = "norm_ratio"
    RSA = "rsa"  # one result per level
    VOCABULARY_DISAGREEMENTS = "vocabulary_disagreements"  # one result per checkpoint


def shown_name(check: CheckName, level: str | None = None) -> str:
    """The name a result is shown by: the check's, or ``rsa[<level>]`` for a level."""
    return str(check) if level is None else f"{check}[{level}]"


def _n_untrained(m: MatrixReport) -> float | None:
    """The untrained rows that something feeds or may (the gate's rule at its default,
    UNTRAINED_USES_TO_FAIL; all of them when the row masks are gone), and the untrained
    rows of other tokens the template or the data feed (geodiag.analysis.fed)."""
    u = m.untrained
    if u is None:
        return None
    counted = u.counted(UNTRAINED_USES_TO_FAIL)
    fed = 0 if m.fed is None else m.fed.counted(UNTRAINED_USES_TO_FAIL)
    return (u.n_untrained if counted is None else int(counted.sum())) + fed


# The value of each block or row check (the RSA check reads one value per level:
# rsa_by_level). None: undefined, or not measured.
VALUES: dict[CheckName, Callable[[MatrixReport], float | None]] = {
    CheckName.EFFECTIVE_RANK_RATIO: lambda m: m.new.centered.effective_rank_ratio,
    CheckName.EFFECTIVE_RANK: lambda m: m.new.centered.effective_rank,
    CheckName.SPREAD_RELATIVE: lambda m: m.new.spread_relative,  # None without a vocabulary
    CheckName.MEAN_PAIRWISE_COSINE: lambda m: m.new.mean_pairwise_cosine,
    CheckName.N_UNTRAINED: _n_untrained,
    CheckName.NORM_RATIO: lambda m: m.norm_ratio,
}


def rsa_by_level(m: MatrixReport) -> dict[str, float | None]:
    """{level: Spearman RSA against its codebook}, None where not measured or undefined."""
    return {lv.name: (lv.rsa.spearman if lv.rsa else None) for lv in m.levels}


def rsa_p_by_level(m: MatrixReport) -> dict[str, float | None]:
    """{level: the RSA's permutation p-value}, None where not measured or undefined."""
    return {lv.name: (lv.rsa.p_value if lv.rsa else None) for lv in m.levels}
