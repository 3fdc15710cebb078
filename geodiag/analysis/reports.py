"""What measuring returns: the report dataclasses that the gate, the text tables, the JSON
and the HTML report format (compute first, render second)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from geodiag.analysis.fed import FedRows
from geodiag.analysis.findings import UntrainedRows
from geodiag.analysis.integrity import IntegrityFinding
from geodiag.io.usage import UsageSource
from geodiag.metrics.codebook import CodebookHealth
from geodiag.metrics.cosine import LevelCosine
from geodiag.metrics.geometry import GeometrySummary
from geodiag.metrics.rsa import RSAResult
from geodiag.metrics.vocabulary_sample import VocabularySample

if TYPE_CHECKING:  # drift is loaded by the commands that measure it, not by every gate
    from geodiag.metrics.drift import DriftResult
    from geodiag.metrics.quantization import QuantizationFindings


@dataclass
class LevelMetrics:
    name: str
    n_tokens: int
    geometry: GeometrySummary
    rsa: RSAResult | None
    rsa_skip_reason: str | None


@dataclass
class Neighbor:
    id: int
    token: str
    cosine: float


@dataclass
class TokenNeighbors:
    id: int
    token: str
    nearest: list[Neighbor]


@dataclass
class MatrixReport:
    role: str  # "input" | "output" (an untied head is its own matrix)
    tensor: str
    # The weights file that holds the tensor (a shard; an adapter's file where it changes
    # the tensor): where a CI page (SARIF) points a finding about these rows.
    file: str
    dtype: str
    n_rows: int
    dim: int
    n_new: int  # rows measured (after dropping non-finite ones, if allowed)
    nonfinite_rows_dropped: int
    new: GeometrySummary
    # None: undefined (reference_undefined_reason says why: no original vocabulary, too few
    # rows), or not taken (a gate's measure reads only its spread: AnalyzeOptions.gate_only)
    reference: GeometrySummary | None
    reference_size: int
    levels: list[LevelMetrics]
    level_cosine: LevelCosine | None
    neighbors: list[TokenNeighbors]
    neighbors_sampled: bool
    # Why the vocabulary-relative figures (spread ratio, nearest original tokens) are null.
    reference_undefined_reason: str | None = None
    untrained: UntrainedRows | None = None
    # Largest new-row norm / largest original-row norm (all original rows); None without
    # a vocabulary. Rows far longer than any known token dominate every softmax.
    norm_ratio: float | None = None
    # Percentiles of the original rows' norms (geodiag.metrics.untrained.NORM_PERCENTILES).
    vocabulary_norms: dict[str, float] | None = None
    # Original rows left out of every vocabulary figure as NaN/Inf (--allow-nonfinite;
    # without it they are bad input), and the first SHOWN_TOKENS of their ids.
    nonfinite_original_rows_dropped: int = 0
    nonfinite_original_ids: list[int] = field(default_factory=list)
    # Set when the vocabulary figures (its mean and spread, hence the untrained-row
    # tolerance, norm_ratio, vocabulary_norms, the non-finite original rows, the nearest
    # original tokens, the reference sample) come from a sample of its rows (a remote
    # checkpoint without --full-vocabulary); None: every original row was read.
    vocabulary_sample: VocabularySample | None = None
    # The rows of tokens outside the new set that the chat template or --data feed,
    # judged for being untrained (geodiag.analysis.fed); None when nothing feeds one.
    fed: FedRows | None = None


@dataclass
class CheckpointReport:
    geodiag_version: str
    path: str
    store: str
    tied: bool
    n_new_tokens: int
    new_token_source: str
    base_vocab_size: int
    level_names: list[str]
    levels_source: str | None
    provenance: dict
    matrices: list[MatrixReport]
    digests: dict[str, str]
    notes: list[str] = field(default_factory=list)
    adapter: dict = field(default_factory=dict)  # PEFT adapter read over a base: what it changed
    stack: dict = field(default_factory=dict)  # the training stack that wrote it, when known
    # Usage of the codes by the sidecar's items (None without a sidecar's items).
    codebook: CodebookHealth | None = None
    integrity: list[IntegrityFinding] = field(default_factory=list)  # save / merge / reload
    reference: str | None = None  # --reference, when given
    # What feeds the new tokens besides the item IDs: --data files, the chat template
    # (geodiag.io.usage); per token in each matrix's untrained findings.
    usage: list[UsageSource] = field(default_factory=list)
    # What could not be counted, and why (a template that does not render, no jinja2): in
    # the notes too; `check` prints these, since they change what its verdict knows.
    usage_notes: list[str] = field(default_factory=list)


@dataclass
class DriftReport:
    before: str
    after: str
    matrix: str
    n_tokens: int
    drift: DriftResult
    levels: dict[str, DriftResult]
    quantization: QuantizationFindings | None = None  # when AFTER is a GGUF file
