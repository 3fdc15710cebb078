"""The probe's figures on an in-memory model: text -> SID decoding constrained to the
index's SIDs (``gti.dropin.probe``, as the drop-in route probes before and after
grounding), the two baselines on the same items (``gti.probe.baselines``), and SID -> text
likelihood against shuffled pairs (``gti.probe.likelihood``).

Shares of items get Wilson 95% intervals (``gti.evaluate.stats.wilson``); the paired
likelihood difference a percentile bootstrap over items and a sign-flip test
(``gti.evaluate.stats.paired_test``). Per-level accuracy is over the items that have a
token at that position (a de-duplication level is ragged).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from geodiag.outputs.report.probe import PROBE_FORMAT, PROBE_FORMAT_VERSION
from gti.dropin.index import level_name
from gti.dropin.probe import decode_items, sid_trie
from gti.evaluate.stats import Interval, Share, paired_test, wilson
from gti.probe.baselines import most_frequent_codes, most_frequent_path, tie_break_path
from gti.probe.likelihood import true_and_shuffled
from gti.probe.source import ProbeSource


@dataclass
class LevelShare:
    level: str  # SID position: a, b, c, ... (d: a de-duplication token where there is one)
    accuracy: Share  # items whose token at this position is right, of those that have one


@dataclass
class Decoding:
    exact_match: Share  # items whose whole SID is right
    levels: list[LevelShare]


@dataclass
class Baseline:
    what: str  # one sentence: the decoder that reads no text
    answer: list[str | None]  # the SID it answers, token by token (None: nothing)
    decoding: Decoding


@dataclass
class Likelihood:
    template: str  # the SID -> text prompt
    true_mean: float  # mean over items of each text's mean log-likelihood, nats/token
    shuffled_mean: float  # the same after another item's SID
    difference: Interval  # true - shuffled, paired over items, bootstrap
    p_value: float  # two-sided sign-flip test of the paired difference
    true_wins: Share  # items whose text is likelier after their own SID
    shuffle_seed: int


@dataclass
class ProbeResult:
    checkpoint: str
    index: str  # the SID map read
    n_index_items: int
    n_items: int  # items asked about
    held_out: bool  # grounding never saw them
    items_from: str  # where the items come from
    text_to_sid: str  # the text -> SID prompt
    model: Decoding  # constrained greedy decoding of the checkpoint
    tie_break: Baseline
    most_frequent: Baseline
    likelihood: Likelihood
    seconds: dict[str, float] = field(default_factory=dict)  # decode, likelihood, total
    notes: list[str] = field(default_factory=list)
    format: str = PROBE_FORMAT
    format_version: int = PROBE_FORMAT_VERSION


def score(
    answers: list[list[int | None]],
    per_level: list[list[int | None]],
    targets: list[tuple[int, ...]],
) -> Decoding:
    """Exact match of each item's ``answers`` and per-position accuracy of ``per_level``
    (for the model both are what it decoded) against ``targets``."""
    exact = sum(list(a[: len(t)]) == list(t) for a, t in zip(answers, targets, strict=True))
    width = max(len(t) for t in targets)
    levels = []
    for k in range(width):
        have = [(p, t) for p, t in zip(per_level, targets, strict=True) if len(t) > k]
        right = sum(len(p) > k and p[k] == t[k] for p, t in have)
        levels.append(LevelShare(level_name(k), wilson(right, len(have))))
    return Decoding(wilson(exact, len(targets)), levels)


def _tokens(tokenizer: PreTrainedTokenizerBase, ids: list[int | None]) -> list[str | None]:
    return [None if i is None else tokenizer.convert_ids_to_tokens(i) for i in ids]


def baselines(
    tokenizer: PreTrainedTokenizerBase,
    trie: dict[tuple, list[int]],
    index_sids: list[tuple[int, ...]],
    targets: list[tuple[int, ...]],
) -> tuple[Baseline, Baseline]:
    """(tie-break, most frequent) on the items of ``targets``."""
    width = max(len(s) for s in index_sids)
    tie = tie_break_path(trie, width)
    path, codes = most_frequent_path(index_sids, width), most_frequent_codes(index_sids, width)
    n = len(targets)
    return (
        Baseline(
            "constrained greedy decoding with every new row identical (a mean init): "
            "ties go to the lowest token id",
            _tokens(tokenizer, tie),
            score([tie] * n, [tie] * n, targets),
        ),
        Baseline(
            "per level the index's most frequent code; exact match: the most frequent "
            "continuation at each step",
            _tokens(tokenizer, path),
            score([path] * n, [codes] * n, targets),
        ),
    )


def probe_model(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    src: ProbeSource,
    *,
    checkpoint: str = "",
    seed: int = 0,
    batch_size: int = 8,
    n_resamples: int = 10_000,
) -> ProbeResult:
    """Every figure of the probe for ``model`` on ``src``'s items."""
    t0 = time.perf_counter()
    model.eval()
    index, items = src.index, src.items
    trie = sid_trie(tokenizer, index)
    targets = [tuple(tokenizer.convert_tokens_to_ids(list(index.items[i]))) for i in items]
    decoded = decode_items(
        model, tokenizer, index, items, src.texts, src.max_text_chars, src.text_to_sid, trie
    )
    t_decode = time.perf_counter() - t0
    index_sids = [tuple(tokenizer.convert_tokens_to_ids(list(s))) for s in index.items.values()]
    tie, frequent = baselines(tokenizer, trie, index_sids, targets)

    t1 = time.perf_counter()
    texts = [src.texts[i][: src.max_text_chars] for i in items]
    sids = [index.sid_string(i) for i in items]
    true, shuffled = true_and_shuffled(
        model, tokenizer, sids, texts, src.sid_to_text, seed=seed, batch_size=batch_size
    )
    test = paired_test(true, shuffled, n_resamples=n_resamples, seed=seed)
    t_lik = time.perf_counter() - t1
    likelihood = Likelihood(
        template=src.sid_to_text,
        true_mean=float(true.mean()),
        shuffled_mean=float(shuffled.mean()),
        difference=test.difference,
        p_value=test.p_value,
        true_wins=wilson(test.wins, len(items)),
        shuffle_seed=seed,
    )
    notes = [] if src.held_out else [src.how]
    return ProbeResult(
        checkpoint=checkpoint,
        index=str(index.path),
        n_index_items=len(index.items),
        n_items=len(items),
        held_out=src.held_out,
        items_from=src.how,
        text_to_sid=src.text_to_sid,
        model=score(decoded, decoded, targets),
        tie_break=tie,
        most_frequent=frequent,
        likelihood=likelihood,
        seconds={
            "decode": round(t_decode, 3),
            "likelihood": round(t_lik, 3),
            "total": round(time.perf_counter() - t0, 3),
        },
        notes=notes,
    )
