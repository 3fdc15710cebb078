"""Per-user ranked lists: the small file every Recall/NDCG number is recomputed from.

One file per (model, split): for each user, the held-out target and the model's top
``top`` item ids, best first. Baselines, SASRec and the LM arms all write this
format, so the statistics (``gti.evaluate.stats``) need nothing but these files.

    {"format": "gti.rankings", "format_version": 1, "split": "test", "top": 20,
     "source": {...}, "users": [["196", "242", ["302", "50", ...]], ...]}

A list may be shorter than ``top`` only when the catalog is (never padded with
placeholders). Users are sorted by id, so two files of the same split line up.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from geodiag.atomic import atomic_write
from geodiag.errors import InputError
from geodiag.jsonio import read_json

FORMAT = "gti.rankings"
FORMAT_VERSION = 1
SUFFIX = ".rankings.json"
# The K of Recall@K / NDCG@K reported from rankings files (study, baselines): every one
# within the top-20 lists the files keep.
RANKING_KS = (5, 10, 20)


def rankings_file(split: str) -> str:
    """The name of a split's rankings file in a folder of them (baselines, a study run)."""
    return f"{split}{SUFFIX}"


@dataclass
class Rankings:
    split: str
    users: list[str]  # sorted
    targets: list[str]  # held-out item per user
    ranked: list[list[str]]  # per user, top items best first
    top: int = 20
    source: dict[str, object] = field(default_factory=dict)  # what made the list

    def __post_init__(self) -> None:
        if not (len(self.users) == len(self.targets) == len(self.ranked)):
            raise ValueError("users, targets and ranked lists must have the same length")
        if list(self.users) != sorted(self.users) or len(set(self.users)) != len(self.users):
            raise ValueError("users must be unique and sorted")


def from_unsorted(
    split: str,
    rows: list[tuple[str, str, list[str]]],
    top: int,
    source: dict[str, object] | None = None,
) -> Rankings:
    """(user, target, ranked) rows in any order -> Rankings (sorted by user)."""
    rows = sorted(rows, key=lambda r: r[0])
    return Rankings(
        split=split,
        users=[r[0] for r in rows],
        targets=[r[1] for r in rows],
        ranked=[list(r[2])[:top] for r in rows],
        top=top,
        source=dict(source or {}),
    )


def to_json(r: Rankings) -> str:
    payload = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "split": r.split,
        "top": r.top,
        "source": r.source,
        "users": [[u, t, lst] for u, t, lst in zip(r.users, r.targets, r.ranked, strict=True)],
    }
    # One user per line: diffs of committed files stay readable.
    head = json.dumps({k: v for k, v in payload.items() if k != "users"}, allow_nan=False)
    body = ",\n".join(json.dumps(row) for row in payload["users"])
    return head[:-1] + ', "users": [\n' + body + "\n]}\n"


def save_rankings(path: Path, r: Rankings) -> Path:
    atomic_write(Path(path), to_json(r))
    return Path(path)


def load_rankings(path: Path) -> Rankings:
    """Read and check a rankings file; any defect is an InputError naming the file."""
    path = Path(path)
    data = read_json(path)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputError(path, f"not a {FORMAT} file")
    if data.get("format_version") != FORMAT_VERSION:
        raise InputError(path, f"format_version {data.get('format_version')!r} is not supported")
    top = data.get("top")
    rows = data.get("users")
    if not isinstance(top, int) or top < 1 or not isinstance(rows, list) or not rows:
        raise InputError(path, "needs a positive 'top' and a non-empty 'users' list")
    for i, row in enumerate(rows):
        ok = (
            isinstance(row, list)
            and len(row) == 3
            and isinstance(row[0], str)
            and isinstance(row[1], str)
            and isinstance(row[2], list)
            and all(isinstance(x, str) for x in row[2])
            and len(row[2]) <= top
        )
        if not ok:
            raise InputError(path, f"user row {i} is not [user, target, [item ids <= top]]")
        if len(set(row[2])) != len(row[2]):
            raise InputError(path, f"user {row[0]!r} lists an item twice")
    try:
        return Rankings(
            split=str(data.get("split")),
            users=[r[0] for r in rows],
            targets=[r[1] for r in rows],
            ranked=[r[2] for r in rows],
            top=top,
            source=dict(data.get("source") or {}),
        )
    except ValueError as e:
        raise InputError(path, str(e)) from None


def target_ranks(r: Rankings) -> np.ndarray:
    """(n_users,) 0-based rank of each user's target in its list; ``top`` when absent."""
    out = np.full(len(r.users), r.top, dtype=np.int64)
    for i, (t, lst) in enumerate(zip(r.targets, r.ranked, strict=True)):
        if t in lst:
            out[i] = lst.index(t)
    return out


def per_user_metrics(r: Rankings, ks: tuple[int, ...] = RANKING_KS) -> dict[str, np.ndarray]:
    """``{"recall@K": (n,) 0/1, "ndcg@K": (n,) 1/log2(rank+2) or 0}`` per user.

    With one held-out item per user, Recall@K is the hit indicator and the ideal DCG
    is 1 (as ``gti.evaluate.metrics``). Means over users give the usual figures.
    """
    if max(ks) > r.top:
        raise ValueError(f"K={max(ks)} exceeds the top {r.top} items the file keeps")
    ranks = target_ranks(r)
    out: dict[str, np.ndarray] = {}
    for k in ks:
        hit = ranks < k
        out[f"recall@{k}"] = hit.astype(np.float64)
        out[f"ndcg@{k}"] = np.where(hit, 1.0 / np.log2(ranks + 2.0), 0.0)
    return out


def metric_means(r: Rankings, ks: tuple[int, ...] = RANKING_KS) -> dict[str, float]:
    return {k: float(v.mean()) for k, v in per_user_metrics(r, ks).items()}


def check_aligned(a: Rankings, b: Rankings, where: str = "rankings") -> None:
    """Same split, same users and targets: what a paired comparison needs."""
    if a.split != b.split or a.users != b.users or a.targets != b.targets:
        raise InputError(
            where, f"the {a.split!r} and {b.split!r} lists do not cover the same users/targets"
        )
