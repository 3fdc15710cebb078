"""Answers of text -> SID decoders that read no text, to hold the model's against.

SIDs are token-id tuples, the trie is ``gti.dropin.probe.sid_trie`` (each prefix -> the ids
that continue it, sorted). Every function returns, per SID position, the id a decoder
answers there (``None`` where it answers nothing in the index).

- tie-break: constrained greedy decoding when all new rows are identical (a mean init):
  every allowed id then gets the same logit, at every step whatever was fed back, and
  ``argmax`` takes the first, the lowest id. The answer is one SID for every item, the
  lowest-id path down the trie. (A backend whose matmul rounds identical rows apart can
  break a tie elsewhere; this is the tie as exact arithmetic breaks it.)
- most frequent: per position, the code the index's items hold most often there (for
  the per-level shares); for the exact match, the SID a decoder answers by taking at
  each step the continuation most of the index's items below the prefix take.
"""

from __future__ import annotations

from collections import Counter

Trie = dict[tuple, list[int]]


def tie_break_path(trie: Trie, width: int) -> list[int | None]:
    """The lowest-id path down ``trie``, ``width`` positions (``None`` past its end)."""
    path: list[int | None] = []
    prefix: tuple = ()
    for _ in range(width):
        nxt = trie.get(prefix)
        if not nxt:
            path.append(None)
            continue
        path.append(nxt[0])
        prefix = (*prefix, nxt[0])
    return path


def most_frequent_codes(sids: list[tuple[int, ...]], width: int) -> list[int | None]:
    """Per position, the id most of ``sids`` hold there (ties: the lowest id)."""
    out: list[int | None] = []
    for k in range(width):
        counts = Counter(s[k] for s in sids if len(s) > k)
        out.append(min(counts, key=lambda i: (-counts[i], i)) if counts else None)
    return out


def most_frequent_path(sids: list[tuple[int, ...]], width: int) -> list[int | None]:
    """Step by step, the continuation most of ``sids`` below the prefix take (ties: the
    lowest id); ``None`` once no SID continues the prefix."""
    path: list[int | None] = []
    below = list(sids)
    for k in range(width):
        counts = Counter(s[k] for s in below if len(s) > k)
        if not counts:
            path.append(None)
            continue
        best = min(counts, key=lambda i: (-counts[i], i))
        path.append(best)
        below = [s for s in below if len(s) > k and s[k] == best]
    return path
