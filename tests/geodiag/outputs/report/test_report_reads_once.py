"""The report opens and reads each checkpoint once (issue 30): figures, the movement since
the init and the drift come from the rows the analysis read. Reference for the drift:
``measure_drift`` from the paths, which opens and reads both checkpoints again."""

from __future__ import annotations

import pytest
from geodiag_fixtures import BASE_VOCAB
from read_counter import EMB, count_reads, rows_read
from report_fixtures import write_set

from geodiag.analysis.drift import measure_drift
from geodiag.analysis.options import AnalyzeOptions
from geodiag.jsonio import dumps
from geodiag.outputs.report import ReportOptions, build_report

N_NEW = 24


@pytest.fixture
def reads(monkeypatch):
    return count_reads(monkeypatch)


def test_report_opens_and_reads_each_checkpoint_once(tmp_path, reads):
    paths = write_set(tmp_path)  # gti-init -> gti-sft is a drift pair
    report = build_report(paths, opts=ReportOptions(n_permutations=20, generated="-"))
    assert [(p.before, p.after) for p in report.drift] == [("gti/init", "gti/sft")]
    assert report.checkpoints[2].report.matrices[0].untrained.movement_basis == "reference"
    for p in paths:
        assert reads.opened[str(p / "model.safetensors")] == 1, p
        got = rows_read(reads, p.name, EMB)
        assert set(got) == set(range(BASE_VOCAB + N_NEW)) and set(got.values()) == {1}, p


def test_report_drift_equals_drift_read_from_the_paths(tmp_path):
    paths = write_set(tmp_path)
    report = build_report(paths, opts=ReportOptions(n_permutations=20, generated="-"))
    want = measure_drift(paths[1], paths[2], opts=AnalyzeOptions(n_permutations=20))
    assert dumps(report.drift[0].reports) == dumps(want)


def test_at_scale_paired_rows_are_not_held_but_read_again(tmp_path, reads, monkeypatch):
    """Rows held as float32 (at scale) are let go after the analysis: the movement and the
    drift read the init's rows again, a block at a time, from the checkpoint opened once."""
    from geodiag.analysis import rows as analysis_rows

    monkeypatch.setattr(analysis_rows, "FLOAT64_ROWS_MAX_ELEMENTS", 0)
    paths = write_set(tmp_path)
    report = build_report(paths, opts=ReportOptions(n_permutations=20, generated="-"))
    for p in paths:
        assert reads.opened[str(p / "model.safetensors")] == 1, p
    new_ids = range(BASE_VOCAB, BASE_VOCAB + N_NEW)
    init = rows_read(reads, "gti-init", EMB)
    # The analysis, the movement of gti-sft since it, then streamed_drift's pass and its
    # RSA samples (the whole matrix, the row's level: 24 rows are all sampled).
    assert {init[i] for i in new_ids} == {5}
    want = measure_drift(paths[1], paths[2], opts=AnalyzeOptions(n_permutations=20))
    assert dumps(report.drift[0].reports) == dumps(want)
