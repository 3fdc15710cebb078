"""The new rows judged without a before: an initializer's draw, and the under-trained
indicators against the rows the files mark unused (rules: :mod:`geodiag.metrics.indicators`).

The rows the files mark unused (:func:`unused_ids`): tokens named as reserved or unused
slots (Gemma's ``<unusedN>``, Llama-3's ``<|reserved_special_token_N|>``, BERT's
``[unusedN]``), tokens a GGUF types UNUSED or CONTROL, and the padding rows past the
tokenizer; the new tokens themselves are left out (their indicator is measured against
the others, never against their own mean).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from geodiag.io.checkpoint import Checkpoint, Matrix
from geodiag.io.formats.gguf import CONTROL, UNUSED
from geodiag.metrics.indicators import (
    ISOTROPY_DIRECTIONS,
    MAX_VOCABULARY_ABOVE,
    MIN_UNUSED_ROWS,
    UNDER_TRAINED_RULE,
    Cut,
    Draw,
    draw_kind,
    indicator_cut,
    principal_directions,
    rank_among,
    unused_cosine,
    unused_mean,
)

# Names of the slots a base reserves and never trains.
RESERVED_NAME = re.compile(r"^\s*[<\[].*(reserved|unused).*[>\]]\s*$", re.IGNORECASE)
# llama.cpp's token types (gguf.TokenType) that mark a row unused.
GGUF_UNUSED_TYPES = {"CONTROL": CONTROL, "UNUSED": UNUSED}
# At most this many unused rows, and this many other rows, are read (seeded sample).
MAX_UNUSED_ROWS = 4096
OTHER_ROWS = 4096
# Original rows sampled (seeded, in the one walk of the vocabulary) for its principal
# directions: 16 directions of SmolLM2's or Gemma's vocabulary from 1,024 rows.
DIRECTION_ROWS = 1024


def unused_ids(ckpt: Checkpoint, *, leave_out_new: bool = True) -> tuple[np.ndarray, list[str]]:
    """(ids ascending, what marked them: one phrase per source) of the rows the files mark
    unused, the new tokens left out unless ``leave_out_new`` is False (the scan)."""
    n_rows = ckpt.matrices[0].n_rows if ckpt.matrices else 0
    sources: list[tuple[str, np.ndarray]] = []
    tok = ckpt.tokenizer
    if tok is not None:
        named = [t.id for t in getattr(tok, "added", []) if RESERVED_NAME.match(t.content or "")]
        sources.append(("named reserved/unused", np.array(named, np.int64)))
    types = getattr(ckpt.store, "token_types", None)
    if callable(types) and (t := types()) is not None:
        for name, code in GGUF_UNUSED_TYPES.items():
            sources.append((f"GGUF type {name}", np.flatnonzero(np.asarray(t) == code)))
    sources.append(("padding past the tokenizer", ckpt.padding_ids()))
    # Boolean masks over the rows, not np.unique's set functions (they import numpy.ma).
    marked = np.zeros(n_rows, bool)
    new = ckpt.new.ids[ckpt.new.ids < n_rows] if leave_out_new else np.zeros(0, np.int64)
    said = []
    for what, ids in sources:
        fresh = np.zeros(n_rows, bool)
        fresh[ids[(ids >= 0) & (ids < n_rows)]] = True
        fresh[new] = False
        fresh &= ~marked
        if fresh.any():
            said.append(f"{int(fresh.sum())} {what}")
            marked |= fresh
    return np.flatnonzero(marked), said


@dataclass
class UnderTrained:
    """The under-trained indicator of one matrix's new rows."""

    indicator: str  # "output cosine to the unused mean" | "input norm"
    n_unused: int  # the rows the files mark unused (the new ones left out)
    n_read: int  # of which read, at most MAX_UNUSED_ROWS (a seeded sample), finite
    unused_sources: list[str]
    cut: float  # indicator units (a cosine, or a norm)
    judged: bool  # False: the rule cannot tell on this model (see reason)
    vocabulary_above: float  # fraction of the sampled other rows past the cut
    unused_median: float
    vocabulary_median: float
    n_flagged: int
    reason: str | None = None
    rule: str = UNDER_TRAINED_RULE
    # Per new row, in the measured rows' order (not in the JSON: the token rows say them).
    _values: np.ndarray | None = None
    _rank: np.ndarray | None = None  # fraction of the other rows at least as under-trained
    _flagged: np.ndarray | None = None


def _scores(kind: str, values: np.ndarray) -> np.ndarray:
    """Higher: more under-trained (a small input norm is the sign)."""
    return -values if kind == "input norm" else values


def indicator_kind(ckpt: Checkpoint, matrix: Matrix) -> str:
    """Magikarp's indicator for this matrix: an output row's cosine (a tied embedding is
    the output too), an untied input row's norm."""
    if matrix.role == "output" or ckpt.tied:
        return "output cosine to the unused mean"
    return "input norm"


def under_trained(
    ckpt: Checkpoint, matrix: Matrix, rows: np.ndarray, seed: int
) -> UnderTrained | None:
    """The indicator of the new ``rows`` (n, d) of ``matrix``; None when the files mark
    fewer than MIN_UNUSED_ROWS unused rows that are not zero."""
    unused, sources = unused_ids(ckpt)
    kind = indicator_kind(ckpt, matrix)
    if len(unused) < MIN_UNUSED_ROWS:
        return None
    rng = np.random.default_rng(seed)
    n_unused = len(unused)
    other = np.ones(matrix.n_rows, bool)  # every unused row out, not only those read
    other[unused] = False
    other[ckpt.new.ids[ckpt.new.ids < matrix.n_rows]] = False
    others = np.flatnonzero(other)
    if len(unused) > MAX_UNUSED_ROWS:
        unused = np.sort(rng.choice(unused, MAX_UNUSED_ROWS, replace=False))
    if len(others) > OTHER_ROWS:
        others = np.sort(rng.choice(others, OTHER_ROWS, replace=False))
    unused_rows = ckpt.read_rows(matrix, unused)
    other_rows = ckpt.read_rows(matrix, others)
    # Zero rows (padding a save zeroed, slots never written) are the zero-rows finding's,
    # and point nowhere: left out, as the reference sample leaves them out.
    keep_u = np.isfinite(unused_rows).all(1) & np.any(unused_rows != 0, axis=1)
    keep_o = np.isfinite(other_rows).all(1)
    # Indexed only when a row goes: a boolean index copies (21 MB of Gemma's 4,096 rows).
    unused_rows = unused_rows if keep_u.all() else unused_rows[keep_u]
    other_rows = other_rows if keep_o.all() else other_rows[keep_o]
    if len(unused_rows) < MIN_UNUSED_ROWS or not len(other_rows):
        return None  # too few to cut by: no indicator, and nothing to say
    if kind == "input norm":
        values = np.linalg.norm(rows, axis=1)
        own = np.linalg.norm(unused_rows, axis=1)
        vocab = np.linalg.norm(other_rows, axis=1)
    else:
        ref = unused_mean(unused_rows, principal_directions(other_rows, 1)[:, 0])
        values, own, vocab = unused_cosine(rows, ref), ref.own, unused_cosine(other_rows, ref)
    cut: Cut = indicator_cut(_scores(kind, own), _scores(kind, vocab))
    scores = _scores(kind, values)
    flagged = (scores >= cut.value) if cut.judged else np.zeros(len(rows), bool)
    sign = -1.0 if kind == "input norm" else 1.0
    reason = None
    if not cut.judged:
        reason = (
            f"{cut.vocabulary_above:.1%} of a sample of the other rows pass the cut "
            f"(> {MAX_VOCABULARY_ABOVE:.0%}): on this model the indicator does not separate the unused rows"
        )
    return UnderTrained(
        kind,
        n_unused,
        len(unused_rows),
        sources,
        sign * cut.value,
        cut.judged,
        cut.vocabulary_above,
        sign * cut.unused_median,
        sign * cut.vocabulary_median,
        int(flagged.sum()),
        reason,
        _values=values,
        _rank=rank_among(scores, _scores(kind, vocab)),
        _flagged=flagged,
    )


def initializer_sigma(config: dict) -> tuple[float, str]:
    """(std, where it came from): config.json's ``initializer_range`` (top level or
    ``text_config``), else transformers' default."""
    from geodiag.metrics.indicators import DEFAULT_INITIALIZER_RANGE

    for where, cfg in (("config.json", config), ("text_config", config.get("text_config"))):
        if isinstance(cfg, dict) and isinstance(cfg.get("initializer_range"), int | float):
            value = float(cfg["initializer_range"])
            if value > 0:
                return value, f"initializer_range {value:g} ({where})"
    return DEFAULT_INITIALIZER_RANGE, f"transformers' default std {DEFAULT_INITIALIZER_RANGE:g}"


def anisotropic(sample_rows: np.ndarray) -> bool:
    """Whether the vocabulary has an anisotropy for trained rows to inherit: its top
    directions, fitted on half the sampled rows, hold more of the other half's energy than
    a draw's (p < ISOTROPY_ALPHA). A vocabulary that is itself a draw (an untrained tiny
    model) leaves the draw test without power: it then judges nothing."""
    from geodiag.metrics.indicators import ISOTROPY_ALPHA, isotropy

    fit, held_out = sample_rows[0::2], sample_rows[1::2]
    iso = isotropy(held_out, principal_directions(fit, ISOTROPY_DIRECTIONS))
    return iso is not None and iso.p_value < ISOTROPY_ALPHA


@dataclass
class DrawFinding:
    """The new rows, as a set, against an initializer's draw."""

    kind: str | None  # Draw.kind; None: trained-like (anisotropic)
    n_rows: int
    share: float  # energy share in the vocabulary's top directions
    expected: float  # an isotropic draw's (k / d)
    p_isotropic: float
    sigma: float
    sigma_source: str
    p_initializer: float
    p_vocabulary_mean: float
    noise: float  # RMS spread of the rows / the vocabulary's spread
    rule: str
    # What shows the rows carry the codebook's structure (then kind is None: rows that
    # correlate with the codebook, or whose levels differ, are no independent draws).
    structure: str | None = None


def draw_finding(
    ckpt: Checkpoint,
    rows: np.ndarray,
    sample_rows: np.ndarray | None,
    vocab_mean: np.ndarray | None,
    vocab_spread: float,
) -> DrawFinding | None:
    """:class:`DrawFinding` of the new ``rows``; None when it cannot be made (too few new
    rows, or too few sampled original rows for the vocabulary's directions)."""
    if sample_rows is None or vocab_mean is None:
        return None
    sample_rows = sample_rows[np.isfinite(sample_rows).all(1) & np.any(sample_rows != 0, axis=1)]
    if len(sample_rows) <= 4 * ISOTROPY_DIRECTIONS or not anisotropic(sample_rows):
        return None
    directions = principal_directions(sample_rows, ISOTROPY_DIRECTIONS)
    sigma, source = initializer_sigma(ckpt.config or {})
    d: Draw | None = draw_kind(rows, directions, vocab_mean, vocab_spread, sigma)
    if d is None:
        return None
    iso = d.isotropy
    return DrawFinding(
        d.kind,
        iso.n_rows,
        iso.share,
        iso.expected,
        iso.p_value,
        d.sigma,
        source,
        d.p_initializer,
        d.p_mean,
        d.noise,
        d.rule,
    )


def structure_evidence(
    levels: list, rows: np.ndarray, level_index: np.ndarray | None
) -> str | None:
    """What shows the new ``rows`` (n, d) carry the codebook's structure, in words, or None:
    a level whose RSA against its codebook is positive and significant (p under
    geodiag.metrics.rsa.SIGNIFICANCE over the number of levels measured: a draw is called
    structured at most that often over all its levels), or levels whose means differ (F test, p <
    ISOTROPY_ALPHA: :func:`geodiag.metrics.indicators.level_means_p`). ``levels``: the
    matrix's LevelMetrics; ``level_index``: each row's level (None: no levels)."""
    from geodiag.metrics.indicators import ISOTROPY_ALPHA, level_means_p
    from geodiag.metrics.rsa import SIGNIFICANCE

    said = []
    tested = [lv for lv in levels if lv.rsa is not None and lv.rsa.p_value is not None]
    for lv in tested:
        r = lv.rsa
        if r.spearman is not None and r.spearman > 0:
            if r.p_value < SIGNIFICANCE / len(tested):
                said.append(f"RSA[{lv.name}] {r.spearman:.2f} (p = {r.p_value:.2g})")
    if level_index is not None and len(rows) == len(level_index):
        p = level_means_p(rows, level_index)
        if p is not None and p < ISOTROPY_ALPHA:
            said.append(f"their levels' means differ (F test, p = {p:.2g})")
    return "; ".join(said) or None
