"""Rank every user of a split with a checkpoint, resumably: the per-user lists the
study commits (``gti.evaluate.rankings``).

The same prompts, trie beam search and catalog as ``gti evaluate``
(``gti.evaluate.layout.next_item_prompts``, ``gti.evaluate.decode.rank_items``): nothing is
excluded from a ranking. Users are ranked in chunks; each finished chunk is appended
(and fsynced) to ``<out>.partial.jsonl``, so a killed evaluation resumes at the
first unranked user. A torn last line (a kill mid-write) is dropped and redone.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer

from geodiag.errors import InputError
from geodiag.io.vocabulary.sidecar import load
from gti.data.sequences import Example
from gti.data.tasks import TaskData
from gti.evaluate.decode import rank_items
from gti.evaluate.layout import PromptLayout, next_item_prompts
from gti.evaluate.rankings import Rankings, from_unsorted, save_rankings
from gti.evaluate.trie import SidTrie
from gti.prompts import pad_id_of

log = logging.getLogger(__name__)


@dataclass
class RankingRun:
    rankings: Rankings
    seconds: float  # wall time of this call (resumed part only)
    users_ranked_now: int


def partial_path(out: Path) -> Path:
    return Path(out).with_name(Path(out).name + ".partial.jsonl")


def _read_partial(path: Path, valid_users: set[str]) -> dict[str, tuple[str, list[str]]]:
    done: dict[str, tuple[str, list[str]]] = {}
    if not path.is_file():
        return done
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            user, target, ranked = json.loads(line)
        except (json.JSONDecodeError, ValueError):
            break  # a torn last line: everything after it is redone
        if user in valid_users:
            done[user] = (target, ranked)
    return done


def rank_split(
    checkpoint: Path,
    task: TaskData,
    examples: list[Example],
    out: Path,
    *,
    split: str,
    beams: int = 20,
    batch_size: int = 8,
    layout: PromptLayout | None = None,
    device: str = "cpu",
    chunk: int = 32,
    source: dict[str, object] | None = None,
    progress: bool = True,
) -> RankingRun:
    """Rank ``examples``' users with ``checkpoint`` in ``layout`` (default: the example
    layout with the chat template's system turn); write ``out`` (a rankings file)."""
    ckpt = Path(checkpoint)
    layout = layout or PromptLayout()
    sids = load(ckpt)
    if not sids.has_token_ids:
        raise InputError(ckpt, "semantic_ids.json records no token ids; pass a gti checkpoint")
    part = partial_path(out)
    by_user = {e.user_id: e for e in examples}
    done = _read_partial(part, set(by_user))
    todo = [e for e in sorted(examples, key=lambda e: e.user_id) if e.user_id not in done]
    t0 = time.perf_counter()
    if todo:
        tokenizer = AutoTokenizer.from_pretrained(ckpt, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(
            ckpt, dtype=torch.float32, local_files_only=True
        )
        model.to(torch.device(device)).eval()
        pad_id = pad_id_of(tokenizer)
        trie = SidTrie.build(sids)
        part.parent.mkdir(parents=True, exist_ok=True)
        with (
            part.open("a", encoding="utf-8") as f,
            tqdm(
                total=len(examples),
                initial=len(done),
                desc=f"rank {split}",
                unit="user",
                disable=not progress,
            ) as bar,
        ):
            for start in range(0, len(todo), chunk):
                batch = todo[start : start + chunk]
                prompts = next_item_prompts(tokenizer, task, batch, layout)
                ranking = rank_items(
                    model, prompts, trie, beams=beams, pad_id=pad_id, batch_size=batch_size
                )
                lines = []
                for e, row in zip(batch, ranking.items.tolist(), strict=True):
                    ranked = [trie.item_ids[i] for i in row if i >= 0]
                    done[e.user_id] = (e.target, ranked)
                    lines.append(json.dumps([e.user_id, e.target, ranked]) + "\n")
                f.write("".join(lines))
                f.flush()
                os.fsync(f.fileno())
                bar.update(len(batch))
    seconds = time.perf_counter() - t0
    rows = [(u, t, r) for u, (t, r) in done.items()]
    rankings = from_unsorted(split, rows, beams, source)
    save_rankings(out, rankings)
    part.unlink(missing_ok=True)
    return RankingRun(rankings, seconds, len(todo))
