"""The grounding-budget bench (tools/grounding_budget.py, tools/grounding_budget_table.py) on
the 40-item tiny world of tests/gti/heldoutworld.py: the budget -> steps rule, resumable
pieces, nothing half-written after a kill, the table's missing pieces, and a piece's figures
against `geodiag check --json` and `gti probe --json` run on the same output."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gti"))
from heldoutworld import build_heldout_world  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

import tools.grounding_budget as bench  # noqa: E402
from tools.grounding_budget import Piece, World, run_piece, steps_for  # noqa: E402
from tools.grounding_budget_table import END, START, render, replace_region  # noqa: E402

HOLDOUT = 4
STEP_S = 1.0  # the calibration written by hand: 0.1 min (6 s) buys 5 steps (init < 1 s)


@pytest.fixture(autouse=True)
def threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return build_heldout_world(tmp_path_factory.mktemp("budget-world"))


def _calibrate(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    record = {
        "date": "2026-12-06T00:00:00",
        "machine_before": bench.machine(),
        "steps": 5,
        "objectives": {o: {"step_s": STEP_S} for o in bench.OBJECTIVES},
    }
    (folder / bench.CALIBRATION_FILE).write_text(json.dumps(record))


def test_budget_to_steps_by_hand():
    assert steps_for(4, 12.5, 7.25) == 31  # (240 - 12.5) / 7.25 = 31.38
    assert steps_for(16, 0.0, 6.5) == 147  # 960 / 6.5 = 147.7
    assert steps_for(1, 0.004, 0.1) == 599  # 59.996 / 0.1
    assert steps_for(1, 61.0, 1.0) == 0  # the init spent the minute


def test_a_present_piece_is_skipped(tmp_path, monkeypatch):
    folder = tmp_path / "res"
    folder.mkdir()
    (folder / "mean-b0.json").write_text("{}")

    def must_not_run(args):
        raise AssertionError("a present piece ran")

    monkeypatch.setattr(bench, "run_gti_init", must_not_run)
    world = World("w", tmp_path / "sids")
    assert run_piece(world, Piece("mean"), folder, tmp_path / "scratch") == folder / "mean-b0.json"


def test_a_killed_piece_leaves_nothing_and_runs_again(world, tmp_path, monkeypatch):
    w = World("ml100k", world.sids_dir)
    folder, scratch = tmp_path / "res", tmp_path / "scratch"

    def killed(ckpt):
        raise KeyboardInterrupt  # SIGINT while measuring, after the checkpoint was written

    monkeypatch.setattr(bench, "probe_figures", killed)
    with pytest.raises(KeyboardInterrupt):
        run_piece(w, Piece("mean"), folder, scratch, holdout=HOLDOUT)
    assert not folder.exists() or not list(folder.iterdir())
    monkeypatch.undo()
    path = run_piece(w, Piece("mean"), folder, scratch, holdout=HOLDOUT)
    assert [p.name for p in folder.iterdir()] == ["mean-b0.json"]
    assert json.loads(path.read_text())["piece"] == "mean-b0"
    assert not (scratch / "mean-b0").exists()  # the checkpoint was deleted after measuring


def _same_as_the_commands(record: dict, ckpt: Path) -> None:
    from geodiag.cli import app as geodiag_app
    from gti.cli import app as gti_app

    res = CliRunner().invoke(geodiag_app, ["check", str(ckpt), "--json"])
    assert res.exit_code in (0, 1), res.output
    checks = json.loads(res.stdout)["results"][0]["checks"]
    assert record["gate"]["passed"] == (res.exit_code == 0)
    assert record["gate"]["failed"] == [c["name"] for c in checks if c["status"] == "fail"]
    rsa = {c["name"][4:-1]: c["value"] for c in checks if c["name"].startswith("rsa[")}
    for level, r in record["rsa"].items():
        if "spearman" in r:
            assert r["spearman"] == pytest.approx(rsa[level], abs=1e-12)
        else:
            assert rsa.get(level) is None
    res = CliRunner().invoke(gti_app, ["probe", str(ckpt), "--json", "--device", "cpu"])
    assert res.exit_code == 0, res.output
    probe = json.loads(res.stdout)
    for key in ("n_items", "held_out", "items_from", "model", "tie_break", "most_frequent"):
        assert record["probe"][key] == probe[key], key
    assert record["probe"]["likelihood"] == probe["likelihood"]


@pytest.mark.parametrize("route", ["sids", "dropin"])
def test_pieces_match_geodiag_check_and_gti_probe(world, tmp_path, route):
    if route == "sids":
        w = World("ml100k", world.sids_dir)
    else:
        w = World("office", world.index, world.items, str(world.model_dir))
    folder, scratch = tmp_path / "res", tmp_path / "scratch"
    _calibrate(folder)
    init = json.loads(
        run_piece(
            w, Piece("description-mean"), folder, scratch, holdout=HOLDOUT, keep=True
        ).read_text()
    )
    _same_as_the_commands(init, scratch / "description-mean-b0")
    assert init["probe"]["held_out"] and init["probe"]["n_items"] == HOLDOUT
    grounded = run_piece(
        w, Piece("description-mean", 0.1), folder, scratch, holdout=HOLDOUT, keep=True
    )
    record = json.loads(grounded.read_text())
    conv = record["conversion"]
    assert conv["init_s"] == init["init_s"] and conv["step_s"] == STEP_S
    assert conv["steps"] == steps_for(0.1, init["init_s"], STEP_S) == 5
    assert "--steps 5" in record["command"] and "--start-from description-mean" in record["command"]
    ckpt = scratch / "gti-from-description-mean-ce-b0.1"
    assert len(bench.step_seconds(ckpt)) == 5
    _same_as_the_commands(record, ckpt)


def _record(strategy: str, budget: float, exact: tuple, level_a: tuple, rsa_a: float) -> dict:
    share = lambda e, lo, hi: {"estimate": e, "low": lo, "high": hi}  # noqa: E731
    decoding = {
        "exact_match": share(*exact),
        "levels": [{"level": "a", "accuracy": share(*level_a)}],
    }
    return {
        "format": bench.PIECE_FORMAT,
        "piece": Piece(strategy, budget).name,
        "strategy": strategy,
        "budget": budget,
        "objective": "ce",
        "norm_correct": "none",
        "sids_sha256": "ab" * 32,
        "conversion": {"steps": 9} if budget else None,
        "gate": {"passed": False, "failed": ["mean_pairwise_cosine"]},
        "rsa": {"a": {"spearman": rsa_a, "p_value": 0.004}, "b": {"undefined": "constant"}},
        "probe": {
            "n_items": 128,
            "held_out": True,
            "items_from": "",
            "model": decoding,
            "tie_break": {"decoding": decoding},
            "most_frequent": {"decoding": decoding},
            "likelihood": {"difference": share(0.25, 0.125, 0.375)},
        },
        "machine": {"cpu": "Test CPU", "threads": 1, "load": [1.5, 1, 1]},
        "load_after": [2.5, 1, 1],
    }


def test_table_shows_missing_pieces_and_the_numbers(tmp_path):
    folder = tmp_path / "ml100k"
    folder.mkdir()
    record = _record("mean", 4, (0.0, 0.0, 0.029), (0.047, 0.02, 0.1), 0.044)
    (folder / "gti-from-mean-ce-b4.json").write_text(json.dumps(record))
    section = render(tmp_path, ["mean", "random"], ["ce"])
    ml100k = section[: section.index("**office**")]  # each world has its table
    rows = {tuple(c.strip() for c in line.split("|")[1:4]): line for line in ml100k.splitlines()}
    got = rows[("mean", "4 min", "ce")]
    assert "| 9 | 0.000 [0.00, 0.03] | 0.047 [0.02, 0.10] | +0.250 [+0.125, +0.375] |" in got
    assert "0.044 (p 0.004) | undef. | - | FAIL: mean_pairwise_cosine |" in got
    for strategy in ("mean", "random"):
        for budget in ("init only", "1 min", "16 min"):
            assert "| missing |" in rows[(strategy, budget, "ce" if budget != "init only" else "-")]
    assert "1 of 8 pieces run" in ml100k and "Test CPU" in ml100k and "1.5-2.5" in ml100k
    assert "pieces run on 1 thread(s)" in ml100k  # what the piece recorded
    assert "0 of 8 pieces run" in section  # office: none, every row missing
    doc = f"# gti\n\nbefore\n\n{START}\nold\n{END}\n\nafter\n"
    new = replace_region(doc, section)
    assert new.startswith("# gti\n\nbefore\n\n" + START) and new.endswith(END + "\n\nafter\n")
    assert "old" not in new and replace_region(new, section) == new
