"""Which checkpoints a report pairs as before -> after: only what the files say is a before,
or what ``--pair`` says; two arms given side by side are compared, never paired by order."""

from __future__ import annotations

import json

import numpy as np
from geodiag_fixtures import (
    base_rows,
    planted_new_rows,
    write_checkpoint,
    write_hostile_tokenizer_checkpoint,
)
from report_fixtures import write_set
from typer.testing import CliRunner

from geodiag.cli import app
from geodiag.jsonio import dumps
from geodiag.outputs.report import ReportOptions, build_report

OPTS = ReportOptions(n_permutations=10, generated="-", command_line="-")


def by_label(report) -> dict[str, dict]:
    """Each checkpoint's report as JSON, less its path-bearing notes."""
    out = {}
    for e in report.checkpoints:
        d = json.loads(dumps(e.report))
        out[e.label] = {k: v for k, v in d.items() if k != "notes"}
    return out


def pairs_of(report) -> list[tuple[str, str]]:
    return [(p.before, p.after) for p in report.pairs]


def test_two_arms_are_not_paired_in_either_order(tmp_path):
    mean, _, _, random = write_set(tmp_path)
    forward = build_report([mean, random], opts=OPTS)
    backward = build_report([random, mean], opts=OPTS)
    for report in (forward, backward):
        assert report.pairs == [] and report.drift == []
        assert report.notes[0].startswith("No pairs: none of the 2 checkpoints")
        assert "--pair BEFORE=AFTER" in report.notes[0]
        for e in report.checkpoints:  # neither is measured from the other
            assert e.report.matrices[0].untrained.movement_basis != "reference"
            assert not any("reference:" in n for n in e.report.notes)
    assert by_label(forward) == by_label(backward)


def test_init_and_sft_pair_by_the_sidecar_in_either_order(tmp_path):
    _, init, sft, _ = write_set(tmp_path)  # gti-sft's sidecar names ../gti-init
    forward = build_report([init, sft], opts=OPTS)
    backward = build_report([sft, init], opts=OPTS)
    for report in (forward, backward):
        assert pairs_of(report) == [("gti/init", "gti/sft")]
        (pair,) = report.pairs
        assert pair.why.startswith(f"{init}, the init checkpoint semantic_ids.json names")
        assert [(d.before, d.after) for d in report.drift] == [("gti/init", "gti/sft")]
        after = next(e for e in report.checkpoints if e.label == "gti/sft")
        assert after.report.matrices[0].untrained.movement_basis == "reference"
    assert by_label(forward) == by_label(backward)
    assert dumps(forward.drift) == dumps(backward.drift)


def test_the_pairs_and_why_are_in_the_json_and_the_page(tmp_path):
    _, init, sft, random = write_set(tmp_path)
    out = tmp_path / "r.html"
    res = CliRunner().invoke(
        app, ["report", str(random), str(init), str(sft), "-o", str(out), "--permutations", "0"]
    )
    assert res.exit_code == 0, res.output
    data = json.loads(out.with_suffix(".json").read_text())
    assert [(p["before"], p["after"]) for p in data["pairs"]] == [("gti/init", "gti/sft")]
    assert "the init checkpoint semantic_ids.json names" in data["pairs"][0]["why"]
    html = out.read_text()
    assert "<b>gti/init</b> &rarr; <b>gti/sft</b>" in html
    assert "random/init</b> &rarr;" not in html and "&rarr; <b>random/init" not in html


def test_pair_flag_pairs_two_checkpoints_the_files_do_not(tmp_path):
    base = base_rows()
    a = write_checkpoint(tmp_path / "a", planted_new_rows("mean", base), base=base)
    rows = planted_new_rows("mean", base)
    rows[:4] += np.random.default_rng(0).normal(size=(4, rows.shape[1]))  # 4 trained rows
    b = write_checkpoint(tmp_path / "b", rows, base=base)
    assert build_report([a, b], opts=OPTS).pairs == []
    for order in ([a, b], [b, a]):
        report = build_report(order, opts=ReportOptions(**{**vars(OPTS), "pairs": (f"{a}={b}",)}))
        (pair,) = report.pairs
        assert pair.why == f"--pair {a}={b}" and (pair.before, pair.after) == (
            "test/init (a)",
            "test/init (b)",
        )
        after = next(e for e in report.checkpoints if e.label == "test/init (b)").report.matrices[0]
        assert after.untrained.movement_basis == "reference"
        assert after.untrained.n_untrained == 20  # the 20 rows left at a's


def test_pair_flag_errors_name_the_flag(tmp_path):
    _, init, sft, _ = write_set(tmp_path)
    other = write_hostile_tokenizer_checkpoint(tmp_path / "other")  # other token strings
    out = tmp_path / "r.html"
    cases = [
        ([init, sft], f"{init}={tmp_path / 'nowhere'}", "not one of the checkpoints given"),
        ([init, sft], f"{init}", "give BEFORE=AFTER"),
        ([init, sft], f"{init}={init}", "paired with itself"),
        ([init, other], f"{init}={other}", "new tokens differ"),
    ]
    for given, value, problem in cases:
        args = ["report", *map(str, given), "--pair", value, "-o", str(out)]
        res = CliRunner().invoke(app, [*args, "--permutations", "0"])
        assert res.exit_code == 2, res.output
        assert "--pair" in res.output and problem in res.output, res.output
        assert not out.exists()


def test_a_run_pairs_with_its_earliest_checkpoint_given(tmp_path):
    """checkpoint-1 is on disk, not given: 3 is paired with 2 (the earliest given) for the
    drift, and measured from 1 (the run's earliest, as its files say)."""
    base = base_rows()
    for step in (1, 2, 3):
        rows = planted_new_rows("grounded", base) * (1 + step / 10)
        write_checkpoint(
            tmp_path / "run" / f"checkpoint-{step}", rows, base=base, with_sidecar=False
        )
    two, three = tmp_path / "run" / "checkpoint-2", tmp_path / "run" / "checkpoint-3"
    report = build_report([three, two], opts=OPTS)
    (pair,) = report.pairs
    assert (pair.before, pair.after) == ("checkpoint-2", "checkpoint-3")
    assert pair.why == "checkpoint-2, the earliest checkpoint of the same run in this report"
    assert [(d.before, d.after) for d in report.drift] == [("checkpoint-2", "checkpoint-3")]
    later = next(e for e in report.checkpoints if e.label == "checkpoint-3")
    notes = [n for n in later.report.notes if n.startswith("reference:")]
    assert len(notes) == 1 and "checkpoint-1, the run's earliest" in notes[0], notes
