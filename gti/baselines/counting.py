"""Counting baselines every recommender paper shows: most-popular and last-item transitions.

Both are fit on the training sequences of the split (``gti.data.sequences``): per
user the items ``i_1..i_{n-2}``, i.e. every interaction but the validation and test
targets. Validation and test users are ranked by the same fitted counts, so the
test histories' last items (the validation targets) are inputs, never counts.

Like the LM arms' evaluation (trie beam search over the whole catalog), nothing is
excluded from a ranking: items the user has already seen may be recommended.

Ties are broken by item id order (string order), so every list is deterministic.
"""

from __future__ import annotations

from collections import Counter, defaultdict


def training_sequences(sequences: dict[str, list[str]]) -> dict[str, list[str]]:
    """Each user's time-ordered items without the validation and test targets (the last
    two), as ``leave_one_out`` holds them out; users with fewer than 3 items keep none."""
    return {u: seq[:-2] for u, seq in sequences.items() if len(seq) > 2}


class MostPopular:
    """Every user gets the items with the most training interactions."""

    def fit(self, sequences: dict[str, list[str]], catalog: list[str]) -> MostPopular:
        counts = Counter(i for seq in sequences.values() for i in seq)
        self.counts_ = counts
        self.order_ = sorted(catalog, key=lambda i: (-counts.get(i, 0), i))
        return self

    def rank(self, history: tuple[str, ...], top: int) -> list[str]:
        return self.order_[:top]


class LastItemTransitions:
    """The items that most often directly followed the user's last item in training,
    then the most popular items not yet listed (the back-off)."""

    def fit(self, sequences: dict[str, list[str]], catalog: list[str]) -> LastItemTransitions:
        self.popular_ = MostPopular().fit(sequences, catalog)
        follows: dict[str, Counter[str]] = defaultdict(Counter)
        for seq in sequences.values():
            for a, b in zip(seq, seq[1:], strict=False):
                follows[a][b] += 1
        pop = self.popular_.counts_
        self.next_ = {
            a: sorted(c, key=lambda b, c=c: (-c[b], -pop.get(b, 0), b)) for a, c in follows.items()
        }
        return self

    def rank(self, history: tuple[str, ...], top: int) -> list[str]:
        head = self.next_.get(history[-1], [])[:top] if history else []
        if len(head) == top:
            return head
        seen = set(head)
        rest = (i for i in self.popular_.order_ if i not in seen)
        return head + [i for _, i in zip(range(top - len(head)), rest, strict=False)]
