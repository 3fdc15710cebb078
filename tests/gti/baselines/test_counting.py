"""Most-popular and last-item transitions on hand-made sequences, and the runner on
the synthetic catalog (files written, users = leave-one-out users)."""

from __future__ import annotations

import json

import pytest

from gti.baselines.counting import LastItemTransitions, MostPopular, training_sequences
from gti.baselines.run import run_baselines
from gti.data.sequences import k_core, leave_one_out
from gti.data.synthetic import make_synthetic
from gti.evaluate.rankings import load_rankings, metric_means

SEQS = {  # user -> time-ordered items; the last two are validation and test targets
    "u1": ["a", "b", "c", "x", "y"],
    "u2": ["a", "b", "d", "x", "y"],
    "u3": ["b", "c", "a", "b", "z"],
}
CATALOG = ["a", "b", "c", "d", "e", "x", "y", "z"]


def test_training_sequences_drop_the_two_held_out_targets():
    assert training_sequences(SEQS) == {
        "u1": ["a", "b", "c"],
        "u2": ["a", "b", "d"],
        "u3": ["b", "c", "a"],
    }
    assert training_sequences({"u": ["a", "b"]}) == {}


def test_most_popular_counts_training_items_only_and_breaks_ties_by_id():
    model = MostPopular().fit(training_sequences(SEQS), CATALOG)
    # b: 3, a: 3, c: 2, d: 1; the held-out x, y, z count nothing; ties by id.
    assert model.rank(("zzz",), 6) == ["a", "b", "c", "d", "e", "x"]


def test_transitions_rank_followers_then_back_off_to_popularity():
    model = LastItemTransitions().fit(training_sequences(SEQS), CATALOG)
    # In training, a -> b twice; b -> c (u1, u3) twice, b -> d once; c -> a once.
    assert model.rank(("q", "a"), 3) == ["b", "a", "c"]
    assert model.rank(("b",), 4) == ["c", "d", "a", "b"]
    # An item never followed by anything: pure popularity; an empty history too.
    assert model.rank(("d",), 3) == ["a", "b", "c"]
    assert model.rank((), 2) == ["a", "b"]


def test_runner_writes_lists_and_metrics_for_every_leave_one_out_user(tmp_path):
    out = tmp_path / "baselines"
    res = run_baselines("synthetic", out, k_core_min=1, n_resamples=200)
    splits = leave_one_out(k_core(make_synthetic().interactions, 1), 20)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        f"{b}/{f}"
        for b in ("most-popular", "transitions")
        for f in ("metrics.json", "test.rankings.json", "valid.rankings.json")
    ]
    for name in ("most-popular", "transitions"):
        for split in ("valid", "test"):
            r = load_rankings(out / name / f"{split}.rankings.json")
            examples = getattr(splits, split)
            assert r.users == sorted(e.user_id for e in examples)
            assert dict(zip(r.users, r.targets, strict=True)) == {
                e.user_id: e.target for e in examples
            }
            assert all(len(lst) == 20 for lst in r.ranked)
            saved = json.loads((out / name / "metrics.json").read_text())
            for metric, value in metric_means(r).items():
                assert saved["splits"][split]["metrics"][metric]["estimate"] == pytest.approx(value)
        assert res[name]["baseline"] == name


def test_cli_writes_baselines_export_and_summary(tmp_path):
    from typer.testing import CliRunner

    from gti.cli import app

    runner = CliRunner()
    out = tmp_path / "bl"
    export = tmp_path / "recbole" / "syn"
    args = [
        "baselines",
        "--data",
        "synthetic",
        "--k-core",
        "1",
        "-o",
        str(out),
        "--resamples",
        "100",
        "--export-recbole",
        str(export),
    ]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "transitions test:" in res.output
    splits = leave_one_out(k_core(make_synthetic().interactions, 1), 20)
    for split in ("train", "valid", "test"):
        lines = (export / f"syn.{split}.inter").read_text().splitlines()
        assert lines[0] == "user_id:token\titem_id_list:token_seq\titem_id:token"
        want = [f"{e.user_id}\t{' '.join(e.history)}\t{e.target}" for e in getattr(splits, split)]
        assert lines[1:] == want
    # --summarize recomputes metrics.json from rankings files alone (as for SASRec).
    (out / "most-popular" / "metrics.json").unlink()
    res = runner.invoke(
        app,
        [
            "baselines",
            "-o",
            str(out),
            "--summarize",
            str(out / "most-popular"),
            "--resamples",
            "100",
        ],
    )
    assert res.exit_code == 0, res.output
    saved = json.loads((out / "most-popular" / "metrics.json").read_text())
    r = load_rankings(out / "most-popular" / "test.rankings.json")
    assert saved["splits"]["test"]["metrics"]["recall@10"]["estimate"] == pytest.approx(
        metric_means(r)["recall@10"]
    )
    res = runner.invoke(app, ["baselines", "-o", str(out), "--summarize", str(tmp_path)])
    assert res.exit_code == 2 and "holds no valid.rankings.json" in res.output
