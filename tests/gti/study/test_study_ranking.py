"""Resumable ranking: a killed run (some users done, a torn last line) finishes with
exactly the lists of an uninterrupted run, ranking only the missing users; and the
lists are those of gti.evaluate's own beam search over the same prompts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from geodiag.io.vocabulary.sidecar import load
from gti.data.tasks import load_task_data
from gti.evaluate.decode import rank_items
from gti.evaluate.rankings import load_rankings
from gti.evaluate.trie import SidTrie
from gti.prompts import prompt_ids
from gti.study.ranking import partial_path, rank_split


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    """A `gti init --strategy random` checkpoint over the synthetic catalog."""
    from gti.init.config import InitConfig
    from gti.init.run import run_init
    from gti.semantic_ids.build import build_sids
    from gti.semantic_ids.config import RQVAEConfig, SidsConfig

    root = tmp_path_factory.mktemp("rank-world")
    rq = RQVAEConfig(codebook_size=8, epochs=3, hidden_dims=(32,), latent_dim=8, batch_size=64)
    build_sids(
        SidsConfig(
            data="synthetic",
            model=str(tiny_model_dir),
            out=root / "sids",
            encoder="bow",
            rqvae=rq,
            progress=False,
            cache_dir=root / "cache",
        )
    )
    return run_init(
        InitConfig(
            sids=root / "sids", out=root / "init", strategy="random", cache_dir=root / "cache"
        )
    )


def test_killed_ranking_resumes_at_the_first_unranked_user(tmp_path, checkpoint):
    sids = load(checkpoint)
    task = load_task_data(sids, "synthetic", k_core_min=1, max_history=20)
    examples = task.splits.test[:11]
    kw = {"split": "test", "chunk": 4, "progress": False}
    full = rank_split(checkpoint, task, examples, tmp_path / "full.json", **kw).rankings
    assert len(full.users) == 11

    out = tmp_path / "resumed.json"
    part = partial_path(out)
    rows = zip(full.users[:5], full.targets[:5], full.ranked[:5], strict=True)
    torn = json.dumps([full.users[5], full.targets[5], full.ranked[5]])[:-7]  # killed mid-write
    part.write_text("".join(json.dumps(list(r)) + "\n" for r in rows) + torn)
    run = rank_split(checkpoint, task, examples, out, **kw)
    assert run.users_ranked_now == 6
    assert not part.exists()
    got = load_rankings(out)
    assert (got.users, got.targets, got.ranked) == (full.users, full.targets, full.ranked)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    trie = SidTrie.build(sids)
    by_user = sorted(examples, key=lambda e: e.user_id)
    prompts = [prompt_ids(tok, [task.sid_of[i] for i in e.history]) for e in by_user]
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    ranking = rank_items(model, prompts, trie, beams=20, pad_id=int(pad))
    assert got.ranked == [
        [trie.item_ids[i] for i in row if i >= 0] for row in ranking.items.tolist()
    ]
