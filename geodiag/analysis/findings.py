"""Per-token findings of one matrix: which new rows are untrained, which only suspected, and
which are odd.

Untrained (the gate's ``n_untrained`` counts them), by proof or a measured movement: in a
group of numerically identical rows, at the vocabulary's mean, all zero, unchanged from the
base's padding row of the same id (``--base``), or barely moved since a reference
checkpoint (``--reference``). Suspected, by a statistic alone (the gate warns): distributed
like the unused padding rows past the tokenizer (without ``--base``:
:func:`geodiag.metrics.untrained.compare_with_padding`), ranked with the rows the files mark
unused, or an isotropic set like an initializer's draw (:mod:`geodiag.analysis.evidence`
says which evidence each rests on, and its words). Beside
them, findings that do not make a row untrained: a code no item uses (dead code), a norm far
outside the vocabulary's. Rules and thresholds: :mod:`geodiag.metrics.untrained`.

Each flagged token gets one :class:`TokenFinding` row, joined to its level, code and the
number of items whose SID uses that code (the sidecar's item map), and to how far it moved:
since the reference with ``--reference``, else from the vocabulary mean.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from geodiag.analysis.evidence import COUNTED, SUSPECTED
from geodiag.analysis.indicators import DrawFinding, UnderTrained, draw_finding, under_trained
from geodiag.analysis.movement import UsageBucket, buckets, movement_since
from geodiag.analysis.rows import MatrixRows, PaddingRows, read_padding
from geodiag.io.checkpoint import Checkpoint, Matrix
from geodiag.io.usage import TokenUsage
from geodiag.io.vocabulary.references import trained_init
from geodiag.io.vocabulary.tokenizer import list_names
from geodiag.metrics.geometry import row_norms, spread
from geodiag.metrics.untrained import (
    NORM_RULE,
    TOLERANCE,
    TOLERANCE_RULE,
    Movement,
    PaddingComparison,
    VocabularyStats,
    barely_moved,
    compare_with_padding,
    distances,
    identical_groups,
    norm_outliers,
    zero_rows,
)

# How many tokens of a group, or of a finding, are named in reports and messages (the
# count is exact). Every limit on the tokens shown lives here.
SHOWN_TOKENS = 8
# How many untrained tokens a training alarm names (geodiag.callback): more than a report's,
# as the alarm's log line is the only place a run says them; the finding's count is exact.
ALARM_TOKENS = 20
SHOWN_GROUPS = 10
# Flagged tokens listed one by one (the counts are exact); a mean-initialized block of
# 100,000 tokens is one finding, not 100,000 lines of JSON.
SHOWN_FINDINGS = 1000
# An equal-size sample of fewer rows than this has no spread to compare with.
MIN_REFERENCE_ROWS = 2

# An untrained token matters when something uses it at least this often (or when no
# source says): the default of the gate's rule (GateConfig.untrained_uses_to_fail).
UNTRAINED_USES_TO_FAIL = 1


def counts_against(uses, known, min_uses: float | None):
    """The gate's rule (GateConfig.untrained_uses_to_fail) for untrained tokens with
    ``uses`` each and whether a zero is ``known`` (scalars or arrays, broadcast): used at
    least ``min_uses`` times, or of unknown use; every one when ``min_uses`` is None or 0.
    The gate, the row masks and the Trainer callback all judge by it."""
    if not min_uses:
        return np.ones(np.shape(uses), bool)
    return np.logical_or(np.logical_not(known), np.asarray(uses) >= min_uses)


# The kinds of per-token finding, in the order a token's findings are listed; those in
# UNTRAINED make a row untrained (proof or a measured movement), those in SUSPECTED only
# suspected (a statistic): geodiag.analysis.evidence.
FINDINGS = {
    "identical": "in a group of identical rows",
    "vocabulary_mean": "at the vocabulary mean",
    "zero": "all zero",
    "unchanged_padding": "the base's padding row, unchanged",
    "like_padding": "looks like the unused padding rows past the tokenizer (a statistic)",
    "barely_moved": "barely moved since the reference",
    "under_trained": "ranks with the rows the files mark unused (a statistic)",
    "initializer_draw": "looks like an isotropic draw, as a set (a statistic)",
    "dead_code": "a code no item uses",
    "norm_small": "norm far below the vocabulary's (never emitted)",
    "norm_large": "norm far above the vocabulary's (always emitted)",
}
UNTRAINED = COUNTED


@dataclass
class TokenGroup:
    """Some new tokens, named: a group of identical rows, or the rows of one finding."""

    size: int
    ids: list[int]  # the first SHOWN_TOKENS, ascending
    tokens: list[str]

    def listed(self, *, counted: bool = False) -> str:
        """The shown tokens, comma-separated, then ", ..." for the rest (``counted``:
        " and N more")."""
        return list_names(self.tokens, self.size, counted=counted)


@dataclass
class TokenFinding:
    """One flagged new token: what was found, and what the sidecar knows of it."""

    id: int
    token: str
    findings: list[str]  # keys of FINDINGS
    level: str | None = None
    code: int | None = None
    n_items: int | None = None  # items whose SID uses this code; None without a sidecar
    movement: float | None = None  # see UntrainedRows.movement_basis
    norm: float | None = None
    # How often something feeds it, in all (item IDs + --data + the chat template), and
    # per source that does (name -> count); None without any usage source.
    uses: int | None = None
    used_by: dict[str, int] = field(default_factory=dict)
    # Whether a zero count is known (a code of the item map, or --data given) or only
    # unknown (a plain token, no --data): an unknown token counts as used by the gate.
    usage_known: bool | None = None
    # The under-trained indicator (UntrainedRows.indicator says which), and the fraction of
    # a sample of the other rows at least as under-trained by it (0: past all of them).
    indicator: float | None = None
    indicator_rank: float | None = None


@dataclass
class UntrainedRows:
    """New rows found untrained row by row (and those only suspected), and the other row
    findings.

    ``tolerance`` is the distance under which two rows (or a row and the mean) count as
    one point.
    """

    n_untrained: int
    n_trained: int  # the other measured rows
    tolerance: float
    tolerance_rule: str
    n_groups: int
    groups: list[TokenGroup]  # the first SHOWN_GROUPS groups of identical rows
    at_vocabulary_mean: TokenGroup | None
    unchanged_padding: TokenGroup | None
    untrained: TokenGroup | None  # all of them, for the verdict
    # The untrained tokens that are codes no item uses (the sidecar's item map): no
    # training example reaches them. None without a sidecar's items.
    dead_codes: TokenGroup | None = None
    zero: TokenGroup | None = None
    barely_moved: TokenGroup | None = None
    movement: Movement | None = None  # the barely-moved cut; None without --reference
    norm_small: TokenGroup | None = None
    norm_large: TokenGroup | None = None
    norm_rule: str | None = None  # None without a vocabulary
    # Without --base, on a padded vocabulary: the new rows against its unused rows (None
    # when there are none, or too few to compare); like_padding: the rows it found alike.
    padding: PaddingComparison | None = None
    like_padding: TokenGroup | None = None
    # "reference": ||row - the reference's row||; "vocabulary mean": ||row - mean||
    movement_basis: str | None = None
    # Which untrained tokens something feeds: the sources counted (the item IDs of the
    # sidecar, --data files, the chat template; none: usage unknown), and the untrained
    # tokens used at least once, known unused, and of unknown use (a plain token without
    # --data). The gate's rule (GateConfig.untrained_uses_to_fail) reads the counts.
    usage_sources: list[str] = field(default_factory=list)
    untrained_used: TokenGroup | None = None
    untrained_unused: TokenGroup | None = None
    untrained_usage_unknown: TokenGroup | None = None
    # Without a before: the under-trained indicator against the rows the files mark unused
    # (None: they mark none), and the new rows as a set against an initializer's draw
    # (None: too few rows to tell); the tokens each calls untrained.
    indicator: UnderTrained | None = None
    under_trained: TokenGroup | None = None
    draw: DrawFinding | None = None
    initializer_draw: TokenGroup | None = None
    # Rows only a statistic calls untrained (SUSPECTED findings, none of UNTRAINED): the gate
    # warns of them, naming the flag that settles it (geodiag.analysis.evidence).
    suspected: TokenGroup | None = None
    # The barely-moved rows that equal the reference's within the tolerance.
    unmoved: TokenGroup | None = None
    # Per UNTRAINED finding, the largest movement of its rows (movement_basis): whether
    # "never left their init" is true of them, or they moved (together, for a group).
    moved_at_most: dict[str, float] = field(default_factory=dict)
    # The new tokens are a tokenizer's added tokens with no base to tell them from: they
    # may be the pretrained file's own (a GGUF's, a chat model's), nobody's additions.
    own_tokens: bool = False
    n_flagged: int = 0  # tokens with any finding
    tokens: list[TokenFinding] = field(default_factory=list)  # the first SHOWN_FINDINGS
    usage_movement: list[UsageBucket] = field(default_factory=list)  # with a sidecar's items
    # Figure data (not in the JSON): per measured row, in token order.
    _movement: np.ndarray | None = None
    _n_items: np.ndarray | None = None
    _untrained: np.ndarray | None = None
    _uses: np.ndarray | None = None  # (n,) int64: item IDs + data + template per row
    _usage_known: np.ndarray | None = None  # (n,) bool
    _at_init: np.ndarray | None = None  # (n,) bool: equal to a known init within tolerance

    def counted(self, min_uses: float | None) -> np.ndarray | None:
        """(n,) the untrained rows the gate counts: used at least ``min_uses`` times, or of
        unknown use; every untrained row without usage counts or when ``min_uses`` is
        None or 0. None when the rows were not kept (a report read back from JSON)."""
        if self._untrained is None:
            return None
        if self._uses is None or self._usage_known is None:
            return self._untrained
        return self._untrained & counts_against(self._uses, self._usage_known, min_uses)

    @property
    def two_populations(self) -> bool:
        """Some rows untrained beside rows that are not: e.g. a base's own added tokens."""
        return self.n_untrained > 0 and self.n_trained > 0


def token_group(ckpt: Checkpoint, ids: np.ndarray) -> TokenGroup:
    shown = np.sort(ids)[:SHOWN_TOKENS]
    return TokenGroup(int(len(ids)), [int(i) for i in shown], [ckpt.token(int(i)) for i in shown])


def items_per_code(ckpt: Checkpoint, ids: np.ndarray) -> np.ndarray | None:
    """(n,) items whose SID uses each token's code, from the sidecar's item map; -1 for a
    token that is no code. None without a sidecar's items."""
    side = ckpt.sidecar
    if side is None or not side.items or not side.has_token_ids or ckpt.new.source != "sidecar":
        return None
    from geodiag.metrics.codebook import code_counts

    codes = np.array(list(side.items.values()), dtype=np.int64)  # (n_items, n_levels)
    counts = code_counts(codes, [lv.size for lv in side.levels])
    by_id = {
        t: int(c)
        for lv, cs in zip(side.levels, counts, strict=True)
        for t, c in zip(lv.token_ids, cs.tolist(), strict=True)
    }
    return np.array([by_id.get(int(i), -1) for i in ids], dtype=np.int64)


def row_findings(
    ckpt: Checkpoint,
    matrix: Matrix,
    rows: np.ndarray,
    ids: np.ndarray,
    vocab: VocabularyStats | None,
    sample: np.ndarray,
    seed: int,  # AnalyzeOptions.seed
    reference_norms: np.ndarray | None = None,
    held: MatrixRows | None = None,
    reference_held: MatrixRows | None = None,
    usage: TokenUsage | None = None,
    drawn: Callable[[], DrawFinding | None] | None = None,
    structure: str | None = None,
) -> UntrainedRows:
    """Every per-token finding of the measured ``rows`` (n, d) of ``ids`` (n,).

    ``sample``: the ids of the original rows sampled as the vocabulary reference (their
    movement since ``--reference`` sets the barely-moved cut); ``reference_norms``: those
    rows' norms (the padding comparison's yardstick). ``held``: what measuring this matrix
    read (the sample's rows, the padding rows), ``reference_held`` the same of the
    reference's matrix: rows found there are not read again. ``drawn``: what gives
    :func:`~geodiag.analysis.indicators.draw_finding` of ``rows``, when the caller started
    it beside these findings; else it is taken here. ``structure``: what shows the rows carry
    the codebook's structure (:func:`~geodiag.analysis.indicators.structure_evidence`):
    rows that correlate with the codebook are no independent draws."""
    n = len(rows)
    scale = vocab.spread if vocab is not None and vocab.n_rows >= MIN_REFERENCE_ROWS else 0.0
    rule = TOLERANCE_RULE
    if scale <= 0:  # no vocabulary to measure by: the new rows' own spread
        scale, rule = spread(rows), f"{TOLERANCE:g} x the new rows' own spread (no vocabulary)"
    tol = TOLERANCE * scale
    groups = identical_groups(rows, tol, seed=seed)
    masks = {k: np.zeros(n, bool) for k in FINDINGS}
    for g in groups:
        masks["identical"][g] = True
    to_mean = distances(rows, vocab.mean) if vocab is not None else None  # (n,), used twice
    if to_mean is not None:
        masks["vocabulary_mean"] = to_mean <= tol
    masks["zero"] = zero_rows(rows)
    base_rows = ckpt.base_padding_rows(matrix, ids)
    if base_rows is not None:
        mask, values = base_rows
        masks["unchanged_padding"][mask] = np.all(rows[mask] == values, axis=1)
    norms = row_norms(rows)
    padding = None
    if base_rows is None and ckpt.base is None and reference_norms is not None:
        pad = held.padding if held is not None else read_padding(ckpt, matrix)
        padding = _padding_comparison(pad, norms, reference_norms)
        if padding is not None and padding.like_padding:
            masks["like_padding"][:] = True
    sample_rows = None if held is None else held.sample_rows
    moved = movement_since(ckpt, matrix, rows, ids, sample, sample_rows, reference_held)
    movement_cut = None
    if moved is not None:
        barely, movement_cut = barely_moved(*moved)
        shown = ckpt.reference.location or str(ckpt.reference.path)
        movement_cut = replace(movement_cut, reference=shown)
        if trained_init(ckpt.reference) is None:  # a grounded init's rows were trained
            masks["barely_moved"] = barely
        movement, basis = moved[0], "reference"
    elif to_mean is not None:
        movement, basis = to_mean, "vocabulary mean"
    else:
        movement, basis = None, None
    indicator = under_trained(ckpt, matrix, rows, seed)
    if indicator is not None and indicator._flagged is not None:
        masks["under_trained"] = indicator._flagged
    draw = None if drawn is None else drawn()
    if drawn is None and vocab is not None:
        pool = None if held is None else held.direction_rows
        draw = draw_finding(ckpt, rows, pool, vocab.mean, vocab.spread)
    if draw is not None and structure is not None:
        draw = replace(draw, kind=None, structure=structure)
    if draw is not None and draw.kind in COUNTED_DRAWS and ckpt.reference is None:
        masks["initializer_draw"][:] = True  # with a before, the movement judges
    untrained = np.logical_or.reduce([masks[k] for k in UNTRAINED])
    suspected = np.logical_or.reduce([masks[k] for k in SUSPECTED]) & ~untrained
    n_items = items_per_code(ckpt, ids)
    if n_items is not None:
        masks["dead_code"] = n_items == 0
    if vocab is not None and vocab.norm_percentiles is not None:
        masks["norm_small"], masks["norm_large"] = norm_outliers(norms, vocab.norm_percentiles)
    found = _Found(masks, untrained, n_items, movement, norms, _usage(ckpt, ids, n_items, usage))
    found.indicator, found.draw, found.suspected = indicator, draw, suspected
    found.at_init = masks["vocabulary_mean"] | masks["unchanged_padding"]
    if basis == "reference":  # equal to the before within the tolerance
        found.at_init = found.at_init | (movement <= tol)
    out = _untrained_rows(ckpt, ids, found, groups, tol, rule, vocab, padding, movement_cut, basis)
    if movement is not None:
        out.moved_at_most = {
            k: float(movement[masks[k]].max()) for k in UNTRAINED if masks[k].any()
        }
    if basis == "reference":
        unmoved = masks["barely_moved"] & (movement <= tol)
        out.unmoved = token_group(ckpt, ids[unmoved]) if unmoved.any() else None
    out.suspected = token_group(ckpt, ids[suspected]) if suspected.any() else None
    out.own_tokens = ckpt.new.source == "tokenizer" and ckpt.base is None
    out._at_init = found.at_init
    return out


# The draws the findings call untrained, without a reference (with one, barely_moved
# judges): the model's own initializer, a noise init around the vocabulary mean. Any other isotropic draw (a deliberate random init) is a doubt the
# integrity note states, naming the flag that settles it (geodiag.analysis.integrity).
COUNTED_DRAWS = ("initializer", "noise")

# The name of the sidecar's item map as a source of usage.
ITEM_IDS = "item IDs"


@dataclass
class _Usage:
    """Per measured row: uses in all, whether a zero is known, and each source's counts."""

    sources: list[str]
    uses: np.ndarray  # (n,) int64
    known: np.ndarray  # (n,) bool
    by_source: list[np.ndarray]  # (n,) per source, in `sources` order


def _usage(
    ckpt: Checkpoint, ids: np.ndarray, n_items: np.ndarray | None, usage: TokenUsage | None
) -> _Usage | None:
    """The rows' usage from the item map (codes only) and ``usage``'s sources; None when
    there is neither."""
    if n_items is None and (usage is None or not usage.sources):
        return None
    n = len(ids)
    names, counts = [], []
    known = np.zeros(n, bool)
    if n_items is not None:
        names.append(ITEM_IDS)
        counts.append(np.maximum(n_items, 0))
        known |= n_items >= 0  # the item map says which codes are used, every one of them
    if usage is not None and usage.sources:
        position = {int(t): k for k, t in enumerate(ckpt.new.ids.tolist())}
        at = np.array([position[int(i)] for i in ids], dtype=np.int64)
        for source, row in zip(usage.sources, usage.counts, strict=True):
            names.append(source.name)
            counts.append(row[at])
            known |= source.complete
    return _Usage(names, np.sum(counts, axis=0), known, counts)


@dataclass
class _Found:
    """The per-row masks of :func:`row_findings` and what goes with them, per measured row."""

    masks: dict[str, np.ndarray]  # FINDINGS key -> (n,) bool
    untrained: np.ndarray  # (n,) bool
    n_items: np.ndarray | None
    movement: np.ndarray | None
    norms: np.ndarray
    usage: _Usage | None = None
    indicator: UnderTrained | None = None
    draw: DrawFinding | None = None
    suspected: np.ndarray | None = None  # (n,) bool
    at_init: np.ndarray | None = None  # (n,) bool


def _untrained_rows(
    ckpt: Checkpoint,
    ids: np.ndarray,
    f: _Found,
    groups: list[np.ndarray],
    tol: float,
    rule: str,
    vocab: VocabularyStats | None,
    padding: PaddingComparison | None,
    movement_cut: Movement | None,
    basis: str | None,
) -> UntrainedRows:
    masks, untrained, n_items, movement = f.masks, f.untrained, f.n_items, f.movement

    def group(kind: str) -> TokenGroup | None:
        return token_group(ckpt, ids[masks[kind]]) if masks[kind].any() else None

    dead_untrained = masks["dead_code"] & untrained
    flagged = np.logical_or.reduce(list(masks.values()))
    use = f.usage

    def some(mask: np.ndarray) -> TokenGroup | None:
        return token_group(ckpt, ids[mask]) if mask.any() else None

    used = unused = unknown = None
    if use is not None:
        used = some(untrained & (use.uses > 0))
        unused = some(untrained & use.known & (use.uses == 0))
        unknown = some(untrained & ~use.known & (use.uses == 0))
    return UntrainedRows(
        n_untrained=int(untrained.sum()),
        n_trained=int((~untrained).sum()),
        tolerance=float(tol),
        tolerance_rule=rule,
        n_groups=len(groups),
        groups=[token_group(ckpt, ids[g]) for g in groups[:SHOWN_GROUPS]],
        at_vocabulary_mean=group("vocabulary_mean"),
        unchanged_padding=group("unchanged_padding"),
        padding=padding,
        like_padding=group("like_padding"),
        untrained=token_group(ckpt, ids[untrained]) if untrained.any() else None,
        dead_codes=token_group(ckpt, ids[dead_untrained]) if dead_untrained.any() else None,
        zero=group("zero"),
        barely_moved=group("barely_moved"),
        movement=movement_cut,
        norm_small=group("norm_small"),
        norm_large=group("norm_large"),
        norm_rule=NORM_RULE if vocab is not None else None,
        movement_basis=basis,
        indicator=f.indicator,
        under_trained=group("under_trained"),
        draw=f.draw,
        initializer_draw=group("initializer_draw"),
        n_flagged=int(flagged.sum()),
        tokens=_token_rows(ckpt, ids, masks, flagged, n_items, movement, f.norms, use, f.indicator),
        usage_sources=[] if use is None else list(use.sources),
        untrained_used=used,
        untrained_unused=unused,
        untrained_usage_unknown=unknown,
        usage_movement=[]
        if n_items is None or movement is None
        else buckets(n_items, untrained, movement),
        _movement=movement,
        _n_items=n_items,
        _untrained=untrained,
        _uses=None if use is None else use.uses,
        _usage_known=None if use is None else use.known,
    )


def _padding_comparison(
    pad: PaddingRows | None, norms: np.ndarray, reference_norms: np.ndarray
) -> PaddingComparison | None:
    """The new rows' norms against the unused padding rows' (at most MAX_PADDING_ROWS of
    them, read once: :func:`geodiag.analysis.rows.read_padding`) and the vocabulary
    sample's."""
    if pad is None:
        return None
    return compare_with_padding(norms, pad.norms[pad.finite], reference_norms)


def _token_rows(
    ckpt, ids, masks, flagged, n_items, movement, norms, use, indicator=None
) -> list[TokenFinding]:
    values = None if indicator is None else indicator._values
    ranks = None if indicator is None else indicator._rank
    new = ckpt.new
    position = {int(t): i for i, t in enumerate(new.ids)}
    out = []
    for i in np.flatnonzero(flagged)[:SHOWN_FINDINGS]:
        tid = int(ids[i])
        at = position[tid]
        level = code = None
        if new.level_index is not None and new.codes is not None:
            level, code = new.level_names[int(new.level_index[at])], int(new.codes[at])
        out.append(
            TokenFinding(
                id=tid,
                token=ckpt.token(tid),
                findings=[k for k in FINDINGS if masks[k][i]],
                level=level,
                code=code,
                n_items=None if n_items is None or n_items[i] < 0 else int(n_items[i]),
                movement=None if movement is None else float(movement[i]),
                norm=float(norms[i]),
                uses=None if use is None else int(use.uses[i]),
                used_by={}
                if use is None
                else {
                    n: int(c[i]) for n, c in zip(use.sources, use.by_source, strict=True) if c[i]
                },
                usage_known=None if use is None else bool(use.known[i]),
                indicator=None if values is None else float(values[i]),
                indicator_rank=None if ranks is None else float(ranks[i]),
            )
        )
    return out
