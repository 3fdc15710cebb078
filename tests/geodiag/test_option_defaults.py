"""Each measuring and report setting is defined once, on its field (AnalyzeOptions,
ReportOptions): the commands' flags, geodiag.measure's keywords and gti's configs take
their defaults, help and bounds from it; the values a command fixes stay fixed."""

from __future__ import annotations

import dataclasses
import inspect
import json
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

import geodiag
from geodiag.analysis.options import AnalyzeOptions
from geodiag.cli import app
from geodiag.errors import InputError
from geodiag.outputs.report.options import ReportOptions
from geodiag.settings import UNSET, default_of, panel_of, spec_of

COMMANDS = {  # command -> the option classes whose flags it shows
    "metrics": (AnalyzeOptions,),
    "check": (AnalyzeOptions,),
    "drift": (AnalyzeOptions,),
    "report": (ReportOptions,),
}
FLAGS = {  # command -> the flags of those classes it has, no more, no fewer
    "metrics": {"--permutations", "--seed", "--neighbors"},
    "check": {"--permutations", "--seed"},
    "drift": {"--permutations", "--seed"},
    "report": {"--title", "--heatmap-max-tokens", "--pair", "--permutations", "--seed"},
}


def _params(command: str) -> dict[str, object]:
    click_command = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    return {p.opts[0]: p for p in click_command.params if p.opts}


def _cli_fields(cls: type) -> dict[str, dataclasses.Field]:
    """flag -> field, for the fields of ``cls`` that are on the command line."""
    out = {}
    for f in dataclasses.fields(cls):
        s = spec_of(f)
        if s.help is not None:
            out[s.flag(f.name)] = f
    return out


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_flag_is_its_field_default_help_and_all(command):
    params = _params(command)
    fields = {k: v for cls in COMMANDS[command] for k, v in _cli_fields(cls).items()}
    shown = set(fields) & set(params)
    assert shown == FLAGS[command]
    for flag in shown:
        f, p = fields[flag], params[flag]
        s = spec_of(f)  # a repeatable flag's unset value (None) parses to the field's default
        assert (s.parse(p.default) if s.cli_default is not UNSET else p.default) == f.default, flag
        assert p.help == spec_of(f).help, flag


def test_report_measures_with_analyze_options_settings():
    """ReportOptions' seed / permutations / neighbours are AnalyzeOptions' fields again."""
    for name in ("n_permutations", "seed", "neighbors_k"):
        assert default_of(ReportOptions, name) == default_of(AnalyzeOptions, name)
    report, analyze = dataclasses.fields(ReportOptions), dataclasses.fields(AnalyzeOptions)
    specs = {f.name: spec_of(f) for f in report}
    for f in analyze:
        if f.name in ("n_permutations", "seed"):
            # the same setting, in AnalyzeOptions' group of --help (not the report page's)
            assert specs[f.name] == dataclasses.replace(
                spec_of(f), panel=panel_of(AnalyzeOptions, f)
            )
            assert specs[f.name].panel == "Measuring"
    assert specs["neighbors_k"].help is None  # not a flag of report


def test_api_keywords_default_to_the_fields():
    sig = inspect.signature(geodiag.measure).parameters
    assert sig["seed"].default == default_of(AnalyzeOptions, "seed")
    assert sig["n_permutations"].default == default_of(AnalyzeOptions, "n_permutations")
    assert sig["neighbors"].default == default_of(AnalyzeOptions, "neighbors_k")


def test_gti_configs_take_geodiag_defaults():
    from gti.experiment.config import ReportSection
    from gti.study.config import StudyConfig

    want = default_of(AnalyzeOptions, "n_permutations")
    assert ReportSection().permutations == want and StudyConfig().permutations == want


def test_metric_functions_have_no_defaults_of_their_own():
    """The settings come from the caller (AnalyzeOptions holds geodiag's): no second 1000."""
    from geodiag.analysis.findings import row_findings
    from geodiag.metrics.drift import drift, streamed_drift
    from geodiag.metrics.neighbors import NearestRows
    from geodiag.metrics.quantization import quantization_findings
    from geodiag.metrics.rsa import rsa, rsa_sample

    for fn in (rsa, drift, streamed_drift, quantization_findings, rsa_sample, NearestRows):
        sig = inspect.signature(fn).parameters
        for name in ("n_permutations", "seed", "max_items", "k"):
            if name in sig:
                assert sig[name].default is inspect.Parameter.empty, (fn.__name__, name)
    assert inspect.signature(row_findings).parameters["seed"].default is inspect.Parameter.empty


CHANGED = """
import dataclasses, json
from geodiag.analysis.options import AnalyzeOptions
fields = {f.name: f for f in dataclasses.fields(AnalyzeOptions)}
fields["n_permutations"].default = 7
fields["seed"].default = 3
import typer, inspect
import geodiag
from geodiag.cli import app
from gti.study.config import StudyConfig
from geodiag.outputs.report.options import ReportOptions
cmds = typer.main.get_command(app).commands
out = {c: {p.opts[0]: p.default for p in cmds[c].params if p.opts} for c in ("metrics", "report")}
sig = inspect.signature(geodiag.measure).parameters
out["api"] = [sig["n_permutations"].default, sig["seed"].default]
out["study"] = StudyConfig().permutations
out["report_options"] = [ReportOptions().n_permutations, ReportOptions().seed]
print(json.dumps(out, default=str))
"""


def test_changing_a_field_default_changes_every_front_door():
    """A new default on the field (here patched before anything reads it) reaches the
    flags, the API keywords, the report's options and gti's config: nothing else holds it."""
    run = subprocess.run([sys.executable, "-c", CHANGED], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    for command in ("metrics", "report"):
        assert (out[command]["--permutations"], out[command]["--seed"]) == (7, 3)
    assert out["api"] == [7, 3] and out["report_options"] == [7, 3] and out["study"] == 7


@pytest.mark.parametrize(
    ("make", "flag", "want"),
    [
        (lambda: AnalyzeOptions(n_permutations=-1), "--permutations", "must be >= 0, got -1"),
        (lambda: AnalyzeOptions(neighbors_k=-2), "--neighbors", "must be >= 0, got -2"),
        (lambda: AnalyzeOptions(rsa_max_items=2), "--rsa-max-items", "must be >= 3, got 2"),
        (lambda: ReportOptions(heatmap_max_tokens=1), "--heatmap-max-tokens", "must be >= 2"),
        (lambda: ReportOptions(heatmap_blocks=1), "--heatmap-blocks", "must be >= 2, got 1"),
        (lambda: ReportOptions(n_permutations=-1), "--permutations", "must be >= 0, got -1"),
    ],
)
def test_bounds_are_checked_when_built_naming_the_flag(make, flag, want):
    with pytest.raises(InputError) as e:
        make()
    assert e.value.where == flag and want in e.value.problem


def test_bad_flags_exit_2_naming_the_flag(tmp_path):
    runner = CliRunner()
    res = runner.invoke(app, ["metrics", str(tmp_path), "--neighbors", "-1"])
    assert res.exit_code == 2 and "--neighbors: must be >= 0, got -1" in res.stderr
    res = runner.invoke(app, ["check", str(tmp_path), "--permutations", "-1"])
    assert res.exit_code == 2 and "--permutations" in res.stderr  # typer's range check


def _spy(monkeypatch, module: str, name: str) -> list:
    seen: list = []

    def fake(*args, **kwargs):
        seen.append(args)
        raise typer.Exit(0)

    monkeypatch.setattr(f"{module}.{name}", fake)
    return seen


def test_each_command_builds_its_options_with_its_fixed_values(monkeypatch, tmp_path):
    runner = CliRunner()
    seen = _spy(monkeypatch, "geodiag.analysis.checkpoint", "measure_checkpoint")
    assert runner.invoke(app, ["metrics", str(tmp_path), "--neighbors", "2"]).exit_code == 0
    assert seen[-1][1] == AnalyzeOptions(neighbors_k=2)
    assert runner.invoke(app, ["check", str(tmp_path), "--seed", "4"]).exit_code == 0
    # No neighbours in the gate, and only the figures its checks read (GATE_MEASURE).
    assert seen[-1][1] == AnalyzeOptions(seed=4, neighbors_max=0, gate_only=True)
    seen = _spy(monkeypatch, "geodiag.analysis.drift", "measure_drift")
    assert runner.invoke(app, ["drift", str(tmp_path), str(tmp_path)]).exit_code == 0
    assert seen[-1][3] == AnalyzeOptions()
    seen = _spy(monkeypatch, "geodiag.outputs.report.write", "write_report")
    args = ["report", str(tmp_path), "--title", "T", "--permutations", "9", "--seed", "1"]
    assert runner.invoke(app, args).exit_code == 0
    opts = seen[-1][3]
    assert (opts.title, opts.n_permutations, opts.seed) == ("T", 9, 1)
    assert opts.heatmap_max_tokens == default_of(ReportOptions, "heatmap_max_tokens")
