"""``gti init --holdout N`` on gti's own SIDs: the items it holds out are recorded, kept from
the inits that read texts and from grounding, and ``gti probe`` asks about exactly them.
Default: none held out, as before (the committed runs' rows stay as they were)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from heldoutworld import build_heldout_world
from safetensors.numpy import load_file

from geodiag.io.vocabulary.sidecar import load
from gti.init.config import InitConfig
from gti.init.holdout import split_holdout
from gti.init.run import run_init, sid_tokens
from gti.probe.config import ProbeConfig
from gti.probe.source import resolve_source


def _new_rows(ckpt: Path):
    sids = load(ckpt)
    rows = load_file(ckpt / "model.safetensors")["model.embed_tokens.weight"]
    return rows[sids.base_vocab_size :]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return build_heldout_world(tmp_path_factory.mktemp("heldout"))


def test_holdout_is_recorded_and_probed(world, tmp_path):
    out = run_init(
        InitConfig(
            out=tmp_path / "dm",
            sids=world.sids_dir,
            strategy="description-mean",
            holdout=4,
            device="cpu",
        )
    )
    run = json.loads((out / "init_config.json").read_text())
    assert run["holdout"] == 4
    sids = load(world.sids_dir)
    held, _ = split_holdout(list(sids.items), 4, 0, sid_tokens(sids))
    src = resolve_source(ProbeConfig(checkpoint=out))
    assert src.held_out and src.items == held and len(held) == 4


def test_held_out_texts_do_not_reach_the_rows(world, tmp_path):
    """description-mean with 4 items held out differs from the one without exactly at the
    tokens those items carry (each row: the mean over its items' texts)."""
    kept = run_init(
        InitConfig(
            out=tmp_path / "h",
            sids=world.sids_dir,
            strategy="description-mean",
            holdout=4,
            device="cpu",
        )
    )
    every = run_init(
        InitConfig(
            out=tmp_path / "all", sids=world.sids_dir, strategy="description-mean", device="cpu"
        )
    )
    assert json.loads((every / "init_config.json").read_text())["holdout"] == 0
    sids = load(world.sids_dir)
    held, _ = split_holdout(list(sids.items), 4, 0, sid_tokens(sids))
    offsets = [sum(lv.size for lv in sids.levels[:k]) for k in range(len(sids.levels))]
    touched = {o + c for i in held for o, c in zip(offsets, sids.items[i], strict=True)}
    differs = {
        k
        for k, (a, b) in enumerate(zip(_new_rows(kept), _new_rows(every), strict=True))
        if not (a == b).all()
    }
    assert differs and differs <= touched


def test_grounding_never_sees_the_held_out_items(world, tmp_path, monkeypatch):
    import gti.init.run as init_run

    seen = {}
    real = init_run.PairStream

    def spy(tokenizer, texts, sid_strings, *args, **kwargs):
        seen["texts"] = list(texts)
        return real(tokenizer, texts, sid_strings, *args, **kwargs)

    monkeypatch.setattr(init_run, "PairStream", spy)
    run_init(
        InitConfig(
            out=tmp_path / "g",
            sids=world.sids_dir,
            strategy="gti",
            holdout=4,
            device="cpu",
            grounding=_few_steps(),
        )
    )
    sids = load(world.sids_dir)
    held, grounded = split_holdout(list(sids.items), 4, 0, sid_tokens(sids))
    texts = [json.loads(x)["text"] for x in (world.root / "catalog.jsonl").read_text().splitlines()]
    by_item = {f"m{i}": t for i, t in enumerate(texts)}
    assert seen["texts"] == [by_item[i] for i in grounded]
    assert not {by_item[i] for i in held} & set(seen["texts"])


def _few_steps():
    from gti.init.config import GroundingConfig

    return GroundingConfig(steps=2, batch_size=4, progress=False)
