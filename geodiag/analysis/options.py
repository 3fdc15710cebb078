"""How a checkpoint is measured: :class:`AnalyzeOptions` (one definition of each setting,
turned into the measuring flags of ``metrics``, ``check`` and ``drift`` by
``geodiag.settings``, and into the defaults of ``geodiag.measure``)."""

from __future__ import annotations

from dataclasses import dataclass

from geodiag.settings import MEASURING, check_bounds, default_of, setting


@dataclass(frozen=True)
class AnalyzeOptions:
    """The measuring settings; a field with help is a flag of the commands that measure,
    with its default (``--permutations``, ``--seed``, ``--neighbors``). The metric
    functions take these values from the caller and have no defaults of their own."""

    HELP_PANEL = MEASURING

    # Default: as many original rows as new ones, capped at reference_cap.
    reference_size: int | None = setting(None, ge=1)
    reference_cap: int = setting(20_000, ge=1)
    n_permutations: int = setting(
        1000,
        help="RSA permutations for the p-value.",
        flags=("--permutations",),
        metavar="N",
        ge=0,
        show_bounds=True,
    )
    seed: int = setting(
        0,
        help="Seed of the vocabulary sample and the permutations.",
        flags=("--seed",),
        metavar="N",
    )
    # RSA on a seeded sample above this many tokens per level.
    rsa_max_items: int = setting(1000, ge=3)
    neighbors_k: int = setting(
        5,
        help="Nearest original tokens per new token (0: off).",
        flags=("--neighbors",),
        metavar="K",
        ge=0,
    )
    # Nearest originals for a seeded sample of this many new tokens.
    neighbors_max: int = setting(500, ge=0)
    # A remote checkpoint's vocabulary figures come from a sample of its original rows,
    # unless --full-vocabulary (geodiag.metrics.vocabulary_sample): as many rows as the
    # reference sample (the two are one sample: geodiag.analysis.rows.vocabulary_sample_size),
    # in this many blocks of consecutive rows (one request each), never fewer than
    # vocabulary_block_min_rows a block nor more than vocabulary_sample_rows in all; a
    # vocabulary of at most vocabulary_sample_rows rows is read whole. 20 blocks: a
    # standard error from 19 degrees of freedom. 10 rows a block: with fewer the stated
    # error of the spread falls short of its real error on SmolLM2-135M's embedding
    # (bench/vocabulary_sample_error.py measures both).
    vocabulary_sample_rows: int = setting(20_000, ge=2)
    vocabulary_sample_blocks: int = setting(20, ge=2)
    vocabulary_block_min_rows: int = setting(10, ge=1)
    # Only the figures a gate check reads (GATE_MEASURE): the new rows' uncentered spectrum
    # and the reference sample's summary (both read by ``metrics`` and the report, by no
    # check) are not taken; the reference's spread, hence the spread ratio, still is.
    gate_only: bool = setting(False)

    def __post_init__(self) -> None:
        check_bounds(self)


# Nearest original tokens off: no check reads them, so the gate's measure (``geodiag
# check``, the Trainer callback's save-time gate) and ``geodiag.measure(neighbors=0)``
# skip their walk. The one spelling of "the gate needs no neighbours".
NO_NEIGHBOURS = {"neighbors_max": 0}
# The gate's measure (``geodiag check``, ``geodiag.check``, the Trainer callback's
# save-time gate): no neighbours, and only the figures its checks read: of the two Gram
# products and four eigensolves a full analysis takes on the new rows and the reference
# sample, one of each (the new rows' centered spectrum) (bench/check_speed.py).
GATE_MEASURE = {**NO_NEIGHBOURS, "gate_only": True}
# The Trainer callback's snapshots run every N steps and must stay cheap: a tenth of a full
# analysis's permutations (a p-value to 0.01), RSA on a sample of this many tokens a level
# (a full analysis samples rsa_max_items).
SNAPSHOT_PERMUTATIONS = default_of(AnalyzeOptions, "n_permutations") // 10
SNAPSHOT_RSA_SAMPLE = 256
