"""5-core filtering and chronological leave-one-out on hand-made logs."""

from __future__ import annotations

from gti.data.catalog import Interaction
from gti.data.sequences import Example, k_core, leave_one_out


def log(rows: list[tuple[str, str, int]]) -> list[Interaction]:
    return [Interaction(u, i, t) for u, i, t in rows]


def test_k_core_iterates_until_stable():
    # k=2. Round 1 drops item "rare" (1 event); that leaves user "c" with 1 event,
    # so round 2 drops "c", which leaves item "y" with 1 event: round 3 drops it.
    rows = [
        ("a", "x", 1),
        ("a", "z", 2),
        ("b", "x", 1),
        ("b", "z", 2),
        ("c", "rare", 1),
        ("c", "y", 2),
        ("d", "y", 1),
        ("d", "x", 2),
        ("d", "z", 3),
    ]
    kept = k_core(log(rows), k=2)
    assert sorted({x.item_id for x in kept}) == ["x", "z"]
    assert sorted({x.user_id for x in kept}) == ["a", "b", "d"]
    users = {u: sum(x.user_id == u for x in kept) for u in "abd"}
    assert min(users.values()) >= 2


def test_k_core_keeps_a_log_that_already_satisfies_it():
    rows = [(u, i, t) for t, (u, i) in enumerate((u, i) for u in "ab" for i in "xy")]
    assert k_core(log(rows), k=2) == log(rows)


def test_leave_one_out_is_chronological_and_caps_history():
    # Out of order on purpose; "i3" and "i4" share a timestamp: file order breaks the tie.
    rows = [
        ("u", "i5", 50),
        ("u", "i1", 10),
        ("u", "i3", 30),
        ("u", "i4", 30),
        ("u", "i2", 20),
        ("v", "j1", 1),
        ("v", "j2", 2),
    ]
    splits = leave_one_out(log(rows), max_history=2)
    assert splits.test == [Example("u", ("i3", "i4"), "i5"), Example("v", ("j1",), "j2")]
    assert splits.valid == [Example("u", ("i2", "i3"), "i4")]  # v has only 2 events: no valid
    assert splits.train == [Example("u", ("i1",), "i2"), Example("u", ("i1", "i2"), "i3")]


def test_leave_one_out_never_trains_on_held_out_items():
    rows = [("u", f"i{t}", t) for t in range(30)]
    splits = leave_one_out(log(rows))
    assert all(len(ex.history) <= 20 for ex in splits.train + splits.valid + splits.test)
    assert {ex.target for ex in splits.train}.isdisjoint({"i28", "i29"})
    assert len(splits.train) == 27  # targets i1..i27
