"""The rows of tokens outside the new set that the chat template or ``--data`` feed, judged
for being untrained: an untrained row hurts whenever a token reaches the model, new or
not (DESIGN.md, "Which tokens matter").

A base whose chat-template tokens never trained (Llama-3 base ships
``<|start_header_id|>``, ``<|end_header_id|>`` and ``<|eot_id|>`` with rows of ~zero), or a
chat-format tool's ``<|im_start|>`` / ``<|im_end|>`` added as special tokens (and so left
out of the new tokens without ``--base``) reach the model on every turn. Their rows are
read and judged by the rules the new rows are (:mod:`geodiag.metrics.untrained`): at the
origin (all zero, or within the untrained-row tolerance of it), at the vocabulary mean,
or in a group of identical rows among them. Each finding names the token, who feeds it
and how often; the gate counts those fed at least ``untrained_uses_to_fail`` times
against ``max_untrained_tokens``, with the new rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from geodiag.io.checkpoint import Checkpoint, Matrix
from geodiag.io.usage import TokenUsage
from geodiag.metrics.geometry import row_norms
from geodiag.metrics.untrained import (
    TOLERANCE,
    TOLERANCE_RULE,
    VocabularyStats,
    distances,
    identical_groups,
)

# The findings a fed row can have, in the order they are listed; every one is untrained.
FED_FINDINGS = {
    "zero": "all zero (or within the tolerance of zero)",
    "vocabulary_mean": "at the vocabulary mean",
    "identical": "identical to another fed token's row",
}
# A data file can feed the whole vocabulary: zero and the mean are tested a block of rows
# at a time; identical rows need the rows at once, so that test takes the most used fed
# tokens up to FED_IDENTICAL_ELEMENTS entries (64 Mi float32: 256 MB; 16,384 rows of
# Llama-3's 4,096, all of SmolLM2's 49,152 at 576) and says how many it left out.
FED_BLOCK_ROWS = 8192
FED_IDENTICAL_ELEMENTS = 64 << 20
SHOWN_FED = 1000  # untrained fed tokens listed one by one (the counts are exact)


@dataclass
class FedToken:
    """One untrained row of a fed token outside the new set."""

    id: int
    token: str
    findings: list[str]  # keys of FED_FINDINGS
    special: bool  # an added special token (left out of the new tokens by their rule)
    uses: int  # in all its sources
    used_by: dict[str, int] = field(default_factory=dict)  # source name -> count
    norm: float | None = None


@dataclass
class FedRows:
    """Tokens outside the new set that a source feeds, judged row by row in one matrix."""

    n_fed: int  # tokens judged
    sources: list[str]  # the sources that feed them (data files, the chat template)
    n_untrained: int
    tolerance: float
    tolerance_rule: str
    tokens: list[FedToken]  # the untrained ones, most used first (SHOWN_FED)
    n_left_out: int = 0  # fed tokens not tested for identical rows (FED_IDENTICAL_ELEMENTS)
    n_past_rows: int = 0  # fed ids past the matrix's rows (an audit finding of their own)
    special: list[str] = field(default_factory=list)  # the fed added special tokens (SHOWN_FED)
    _uses: np.ndarray | None = field(default=None, repr=False)  # (n_untrained,) every one

    def counted(self, min_uses: float | None) -> int:
        """How many untrained fed tokens the gate's rule counts: fed at least ``min_uses``
        times (every one when None or 0)."""
        uses = self._uses if self._uses is not None else np.array([t.uses for t in self.tokens])
        if not min_uses:
            return self.n_untrained if self._uses is not None else len(self.tokens)
        return int((uses >= min_uses).sum())


def fed_rows(
    ckpt: Checkpoint,
    matrix: Matrix,
    vocab: VocabularyStats | None,
    usage: TokenUsage | None,
    seed: int,
) -> FedRows | None:
    """The fed tokens' rows of ``matrix`` judged (module docstring); None when no source
    feeds a token outside the new set, or there is no vocabulary to judge by."""
    if usage is None or not len(usage.fed_ids) or vocab is None or vocab.spread <= 0:
        return None
    counts = usage.fed_counts  # (n_sources, n_fed)
    assert counts is not None
    inside = usage.fed_ids < matrix.n_rows
    ids, counts = usage.fed_ids[inside], counts[:, inside]
    total = counts.sum(axis=0)
    tol = TOLERANCE * vocab.spread
    n = len(ids)
    if not n:
        return None
    norms, to_mean, finite = np.empty(n), np.empty(n), np.empty(n, bool)
    for start in range(0, n, FED_BLOCK_ROWS):
        rows = ckpt.read_rows(matrix, ids[start : start + FED_BLOCK_ROWS], float32=True)
        at = slice(start, start + len(rows))
        finite[at] = np.isfinite(rows).all(axis=1)  # NaN/Inf: check_original_rows' finding
        norms[at], to_mean[at] = row_norms(rows), distances(rows, vocab.mean)
    masks = {
        "zero": finite & (norms <= tol),
        "vocabulary_mean": finite & (to_mean <= tol),
        "identical": np.zeros(n, bool),
    }
    most = max(FED_IDENTICAL_ELEMENTS // max(matrix.dim, 1), 2)
    pick = np.flatnonzero(finite)
    if len(pick) > most:
        pick = np.sort(pick[np.argsort(-total[pick], kind="stable")[:most]])
    n_left_out = int(finite.sum()) - len(pick)
    if len(pick) >= 2:
        rows = ckpt.read_rows(matrix, ids[pick], float32=True)
        for g in identical_groups(rows, tol, seed=seed):
            masks["identical"][pick[g]] = True
        del rows
    untrained = np.logical_or.reduce(list(masks.values()))
    names = [s.name for s in usage.sources]
    added = ckpt.tokenizer.added if ckpt.tokenizer is not None else []  # no len(): no vocab read
    special = {t.id for t in added if t.special}
    order = np.flatnonzero(untrained)
    order = order[np.argsort(-total[order], kind="stable")]
    tokens = [
        FedToken(
            id=int(ids[i]),
            token=ckpt.token(int(ids[i])),
            findings=[k for k in FED_FINDINGS if masks[k][i]],
            special=int(ids[i]) in special,
            uses=int(total[i]),
            used_by={n: int(c) for n, c in zip(names, counts[:, i], strict=True) if c},
            norm=float(norms[i]),
        )
        for i in order[:SHOWN_FED]
    ]
    feeding = [n for n, c in zip(names, counts, strict=True) if c.any()]
    fed_special = [ckpt.token(int(i)) for i in ids if int(i) in special][:SHOWN_FED]
    return FedRows(
        n_fed=len(ids),
        sources=feeding,
        n_untrained=int(untrained.sum()),
        tolerance=float(tol),
        tolerance_rule=TOLERANCE_RULE,
        tokens=tokens,
        n_left_out=n_left_out,
        n_past_rows=int((~inside).sum()),
        special=fed_special,
        _uses=total[order],
    )


def fed_uses(t: FedToken) -> str:
    """``<|eot_id|> (special; all zero; fed 3x per conversation)`` or ``w7 (all zero; fed
    3x in train.jsonl)`` for a FedToken: its first finding (zero rows are identical too)."""
    parts = [
        f"{c}x per conversation" if name.startswith("the chat template") else f"{c}x in {name}"
        for name, c in t.used_by.items()
    ]
    what = FED_FINDINGS[t.findings[0]].split(" (")[0]
    special = "special; " if t.special else ""
    return f"{t.token} ({special}{what}; fed {', '.join(parts)})"
