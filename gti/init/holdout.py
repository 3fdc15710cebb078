"""Which items grounding holds out, so that ``gti probe`` asks about items it never saw.

One draw for both routes (gti's own SIDs, a framework's index: ``--holdout``), and the
same draw again in ``gti probe`` from the ``holdout`` and ``seed`` a run records in its
``init_config.json``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping, Sequence

import numpy as np


def split_holdout(
    items: list[str], n: int, seed: int, tokens: Mapping[str, Sequence[Hashable]] | None = None
) -> tuple[list[str], list[str]]:
    """(held out, grounded): a seeded sample of at most ``n`` items, a tenth at most. With
    ``tokens`` (item -> its SID tokens), every token of a held-out item is also carried by a
    grounded one: the probe asks for a new combination of grounded codes, and no token is
    left at its init for the probe's sake (``geodiag check`` fails a token the index feeds
    and grounding never reached). A sampled item that would strand a token is replaced by
    the next one in a seeded order that strands none (fewer are held out when too few do)."""
    n = min(n, len(items) // 10)
    rng = np.random.default_rng(seed)
    chosen = rng.choice(len(items), size=n, replace=False).tolist()
    if tokens is not None:
        chosen = _stranding_none(items, chosen, tokens, rng)
    held = set(chosen)
    return [i for k, i in enumerate(items) if k in held], [
        i for k, i in enumerate(items) if k not in held
    ]


def _stranding_none(
    items: list[str], chosen: list[int], tokens: Mapping[str, Sequence[Hashable]], rng
) -> list[int]:
    """``chosen`` (positions in ``items``) with each item that would take the last grounded
    carrier of one of its tokens replaced, in the order of a seeded permutation."""
    carriers = Counter(t for i in items for t in set(tokens[i]))
    kept: set[int] = set()
    refused: set[int] = set()

    def take(k: int) -> None:
        if all(carriers[t] > 1 for t in set(tokens[items[k]])):
            carriers.subtract(set(tokens[items[k]]))
            kept.add(k)
        else:
            refused.add(k)

    for k in chosen:
        take(k)
    if refused:
        for k in rng.permutation(len(items)).tolist():
            if len(kept) == len(chosen):
                break
            if k not in kept and k not in refused:
                take(k)
    return sorted(kept)
