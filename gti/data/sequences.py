"""User histories for next-item generation: k-core filtering and leave-one-out.

The protocol of TIGER / LC-Rec on MovieLens and Amazon: keep users and items
with at least 5 interactions (repeated until stable, since dropping a user can
push an item under 5 and back), sort each user's events by time, hold out the
last item for test and the second-to-last for validation, train on the rest.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from gti.data.catalog import Interaction


@dataclass(frozen=True)
class Example:
    user_id: str
    history: tuple[str, ...]  # item ids, oldest first, at most max_history
    target: str


@dataclass
class Splits:
    train: list[Example] = field(default_factory=list)
    valid: list[Example] = field(default_factory=list)
    test: list[Example] = field(default_factory=list)


def k_core(interactions: list[Interaction], k: int = 5) -> list[Interaction]:
    """Drop users and items with fewer than ``k`` interactions until none is left."""
    kept = list(interactions)
    while True:
        users = Counter(x.user_id for x in kept)
        items = Counter(x.item_id for x in kept)
        nxt = [x for x in kept if users[x.user_id] >= k and items[x.item_id] >= k]
        if len(nxt) == len(kept):
            return nxt
        kept = nxt


def user_sequences(interactions: list[Interaction]) -> dict[str, list[str]]:
    """Item ids per user in time order; ties keep file order (a stable sort), as
    MovieLens logs many ratings within the same second."""
    seqs: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    for pos, x in enumerate(interactions):
        seqs[x.user_id].append((x.timestamp, pos, x.item_id))
    return {u: [item for *_, item in sorted(evts)] for u, evts in seqs.items()}


def leave_one_out(interactions: list[Interaction], max_history: int = 20) -> Splits:
    """Chronological leave-one-out.

    For a user with items ``i_1..i_n``: test predicts ``i_n`` from ``i_1..i_{n-1}``,
    validation predicts ``i_{n-1}`` from ``i_1..i_{n-2}``, and every earlier position
    ``t >= 2`` is a training example (``i_t`` from ``i_1..i_{t-1}``), as in LC-Rec.
    Histories keep the most recent ``max_history`` items. Users with one event give
    nothing; with two, only a test example.
    """
    if max_history < 1:
        raise ValueError(f"max_history must be >= 1, got {max_history}")
    splits = Splits()

    def example(user: str, seq: list[str], t: int) -> Example:
        return Example(user, tuple(seq[max(0, t - max_history) : t]), seq[t])

    for user, seq in user_sequences(interactions).items():
        n = len(seq)
        if n >= 2:
            splits.test.append(example(user, seq, n - 1))
        if n >= 3:
            splits.valid.append(example(user, seq, n - 2))
        splits.train += [example(user, seq, t) for t in range(1, n - 2)]
    return splits
