"""Trajectories written before the checks took their figures' names still read (issue 42)."""

from __future__ import annotations

import json

from geodiag.gate.trajectory import RENAMED, from_jsonl


def _log(path, names: dict[str, str]) -> None:
    """Three records whose structure keys the figures by ``names`` (current -> written)."""
    lines = []
    for step in (0, 10, 20):
        structure = {
            "effective_rank_ratio": step / 100,
            names["spread_relative"]: step / 50,
            names["mean_pairwise_cosine"]: 1 - step / 60,
            names["n_untrained"]: 20 - step,
            "rsa": {"a": None},
            "rsa_p": {"a": None},
        }
        lines.append(json.dumps({"step": step, "elapsed_s": None, "structure": structure}))
    path.write_text("\n".join(lines) + "\n")


def test_older_keys_read_as_the_current_ones(tmp_path):
    current = {k: k for k in ("spread_relative", "mean_pairwise_cosine", "n_untrained")}
    older = {str(new): old for old, new in RENAMED.items()}
    assert set(older) == set(current) and set(older.values()).isdisjoint(current)
    _log(tmp_path / "new.jsonl", current)
    _log(tmp_path / "old.jsonl", older)
    new, _ = from_jsonl(tmp_path / "new.jsonl", label="t")
    old, _ = from_jsonl(tmp_path / "old.jsonl", label="t")
    assert new.spread_relative == [0.0, 0.2, 0.4]  # hand-computed: step / 50
    assert new.n_untrained == [20.0, 10.0, 0.0]
    assert (old.spread_relative, old.mean_pairwise_cosine, old.n_untrained) == (
        new.spread_relative,
        new.mean_pairwise_cosine,
        new.n_untrained,
    )
