"""The report's probe table: shown for a checkpoint whose folder holds ``gti probe``'s
probe.json, every number equal to that JSON, names escaped, a file that is not a probe
skipped with a note.

probe_fixture.json is what ``gti probe CKPT --write`` wrote for the tiny mean-init
checkpoint of tests/gti/probe/conftest.py (paths and timings replaced); geodiag reads it
without torch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from geodiag_fixtures import base_rows, planted_new_rows, write_checkpoint
from report_fixtures import Page, strict_json

from geodiag.outputs.report import ReportOptions, write_report
from geodiag.outputs.report.html import resolve

FIXTURE = Path(__file__).with_name("probe_fixture.json")
NASTY = "<script>alert(1)</script> & \x1b[31m"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("probe-report")
    base = base_rows()
    prov = {"init_strategy": "mean", "stage": "init", "step": 0, "seed": 0}
    mean = write_checkpoint(
        root / "mean", planted_new_rows("mean", base), base=base, provenance=prov
    )
    prov = {**prov, "init_strategy": "gti"}
    gti = write_checkpoint(
        root / "gti", planted_new_rows("grounded", base), base=base, provenance=prov
    )
    probe = json.loads(FIXTURE.read_text())
    probe["items_from"] = NASTY
    (mean / "probe.json").write_text(json.dumps(probe))
    (gti / "probe.json").write_text(json.dumps({"format": "something else"}))
    opts = ReportOptions(title="probe", n_permutations=20, command_line="geodiag report (test)")
    files = write_report([mean, gti], root / "out" / "r.html", opts=opts)
    html = files.html.read_text(encoding="utf-8")
    return html, strict_json(files.json.read_text(encoding="utf-8")), probe


def test_the_probe_section_shows_each_number_of_probe_json(built):
    html, data, probe = built
    assert 'id="probe"' in html and "mean/init: <span" in html
    by_label = {c["label"]: c for c in data["checkpoints"]}
    assert by_label["mean/init"]["probe"] == probe
    assert by_label["gti/init"]["probe"] is None
    section = html[html.index('id="probe"') : html.index('<section id="drift"')]
    marked = Page(section).marked
    assert len(marked) == 1 + 4 * 9 + 9  # items; exact + 3 levels x 3 decoders x 3; likelihood
    for ptr, text in marked:
        assert ptr.startswith("/checkpoints/0/probe/")
        value = resolve(data, ptr)
        assert float(text) == pytest.approx(value, abs=5e-4 * max(1, abs(value))), ptr


def test_names_are_escaped_and_a_foreign_file_is_a_note(built):
    html, data, _ = built
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt; &amp;" in html
    assert any("not a `gti probe` result" in n for n in data["notes"])
