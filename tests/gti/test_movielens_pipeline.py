"""The main experiment end to end (slow: real PyPI downloads and SmolLM2 encoding,
a few minutes on 2 cores the first time, seconds once cached). Run with -m slow."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from geodiag.io.vocabulary import sidecar
from gti.cli import app
from gti.data import movielens
from gti.data.sequences import k_core, leave_one_out


@pytest.mark.slow
def test_movielens_fetch_and_protocol():
    ds = movielens.load()
    assert len(ds.catalog) == 1682 and len(ds.interactions) == 100_000
    kept = k_core(ds.interactions, k=5)
    splits = leave_one_out(kept)
    assert (
        len(splits.test) == len({x.user_id for x in kept}) == 943
    )  # every ML-100k user has >= 20 ratings


@pytest.mark.slow
def test_movielens_sids_with_smollm2(tmp_path):
    out = tmp_path / "sids"
    result = CliRunner().invoke(app, ["sids", "build", "-o", str(out), "--no-progress"])
    assert result.exit_code == 0, result.output
    sids = sidecar.load(out)
    assert len(sids.items) == 1682 and sids.base_vocab_size == 49152
    assert [(lv.name, lv.size) for lv in sids.levels] == [("a", 256), ("b", 256), ("c", 256)]
    stats = json.loads((out / "stats.json").read_text())
    assert stats["collisions_after"]["collision_rate"] == 0.0
    assert all(lv["utilization"] > 0.9 for lv in stats["levels"])
