"""What a report computes and shows: :class:`ReportOptions` (one definition of each
setting; the fields with help are ``geodiag report``'s flags, via ``geodiag.settings``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from geodiag.analysis.options import AnalyzeOptions
from geodiag.gate.checks import GateConfig
from geodiag.settings import OUTPUTS, check_bounds, same_as, setting

DEFAULT_OUTPUT = Path("reports/report.html")  # NAME.html; NAME.json goes beside it


@dataclass(frozen=True)
class ReportOptions:
    """What the report computes and shows. The measuring settings are AnalyzeOptions'
    fields again (:func:`geodiag.settings.same_as`): the same defaults, help and bounds as
    ``geodiag check`` and ``metrics``."""

    HELP_PANEL = OUTPUTS  # the page's; the measuring settings keep AnalyzeOptions' panel

    title: str = setting(
        "geodiag report", help="Title of the page.", flags=("--title",), metavar="TEXT"
    )
    n_permutations: int = same_as(AnalyzeOptions, "n_permutations")
    seed: int = same_as(AnalyzeOptions, "seed")
    gate: GateConfig = field(default_factory=GateConfig)
    # Above this many tokens a cosine map shows block means (an n x n map of 100,000 SID
    # tokens would be 80 GB in float64 and unreadable anyway).
    heatmap_max_tokens: int = setting(
        2000,
        help="Above this many tokens, cosine maps show block means.",
        flags=("--heatmap-max-tokens",),
        metavar="N",
        ge=2,
    )
    pairs: tuple[str, ...] = setting(
        (),
        help="BEFORE=AFTER: measure AFTER from BEFORE (both given as checkpoints) and show "
        "their drift; repeatable. Without it only what the files say is a before is paired "
        "(a sidecar's init checkpoint, an earlier checkpoint-N of the run, an adapter's "
        "base), never two checkpoints by their order.",
        flags=("--pair",),
        cli_type=list[str] | None,
        cli_default=None,
        parse=lambda values: tuple(values or ()),
    )
    heatmap_blocks: int = setting(400, ge=2)  # about this many blocks across, when aggregated
    neighbors_k: int = same_as(AnalyzeOptions, "neighbors_k", help=None)  # not a report flag
    # New tokens in the nearest-originals table, per checkpoint.
    neighbors_shown: int = setting(6, ge=0)
    histogram_bins: int = setting(40, ge=1)
    command_line: str | None = None  # default: this process's argv
    generated: str | None = None  # default: now, UTC, ISO 8601

    def __post_init__(self) -> None:
        check_bounds(self)
