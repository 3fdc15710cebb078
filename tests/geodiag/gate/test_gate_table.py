"""The gate's table of checks (geodiag.gate.checks.GateConfig / CHECKS) and everything derived from
it: the check command's flags, geodiag.check's keywords, the report's threshold lines,
action.yml and docs/cli.md's table. What each check decides, and the Trainer callback's
collapse test, are tests/geodiag/gate/test_checks.py's."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest
import typer

import geodiag
from geodiag.cli import app
from geodiag.gate.checks import (
    CHECKS,
    SCOPES,
    SETTINGS,
    THRESHOLDS,
    Check,
    GateConfig,
    Rule,
)
from tools import gate_docs

ROOT = Path(__file__).resolve().parents[3]


def check_options() -> dict[str, str]:
    """{flag: help} of `geodiag check`."""
    command = typer.main.get_command(app).commands["check"]
    return {o: p.help for p in command.params for o in getattr(p, "opts", [])}


def test_every_threshold_has_a_flag_a_keyword_an_action_input_and_a_docs_row():
    yaml = pytest.importorskip("yaml")
    options = check_options()
    keywords = inspect.signature(geodiag.check).parameters
    action = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
    step = next(s for s in action["runs"]["steps"] if s.get("id") == "check")
    cli_page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert [c.field for c in SETTINGS] == [f.name for f in dataclasses.fields(GateConfig)]
    assert {c.field for c in CHECKS} | {r.field for r in SETTINGS if isinstance(r, Rule)} == set(
        THRESHOLDS
    )
    for c in SETTINGS:
        name = c.flag.removeprefix("--")
        assert c.flag in options, c.field
        assert keywords[c.field].kind is inspect.Parameter.KEYWORD_ONLY, c.field
        assert action["inputs"][name] == {
            "description": f"{c.help} (geodiag default {c.default_text}).",
            "required": False,
            "default": "",
        }
        env = gate_docs.env_name(c)
        assert step["env"][env] == f"${{{{ inputs.{name} }}}}"
        assert f'[ -n "${env}" ] && args+=({c.flag} "${env}")' in step["run"]
        assert f"| `{c.flag} {c.metavar}` |" in cli_page, c.flag


def test_help_shows_the_field_defaults():
    options = check_options()
    shown = {c.flag: options[c.flag] for c in SETTINGS}
    assert shown["--min-spread-ratio"].endswith("[0.05].")
    assert shown["--min-rsa"].endswith("[off].")
    assert shown["--untrained-uses-to-fail"].endswith("[1].")
    for c in SETTINGS:
        default = dataclasses.fields(GateConfig)[THRESHOLDS.index(c.field)].default
        assert shown[c.flag] == f"{c.help} [{'off' if default is None else f'{default:g}'}].", c


@pytest.mark.parametrize("filename", ["action.yml", "docs/cli.md"])
def test_committed_files_are_rendered_from_the_table(filename):
    text = (ROOT / filename).read_text(encoding="utf-8")
    assert gate_docs.render(text, filename) == text, (
        f"{filename} is stale: run `python -m tools.gate_docs`"
    )


def test_rendering_replaces_the_blocks_and_only_them():
    text = (ROOT / "action.yml").read_text(encoding="utf-8")
    begin, _ = gate_docs._markers("env", "#")
    stale = text.replace(begin + "\n", begin + "\n        GEODIAG_MAX_GONE: ${{ inputs.gone }}\n")
    assert stale != text and gate_docs.render(stale, "action.yml") == text
    with pytest.raises(ValueError, match="no block"):
        gate_docs.render("a: 1\n", "action.yml")


def test_checks_are_listed_scope_by_scope():
    scopes = [SCOPES.index(c.scope) for c in CHECKS]
    assert scopes == sorted(scopes)
    assert all((c.read is None) == (c.scope in ("level", "checkpoint")) for c in CHECKS)
    assert all((c.read_report is None) == (c.scope != "checkpoint") for c in CHECKS)


def _unit(**kw) -> Check:
    said = dict(sentence=lambda c, m: "", explain=lambda m, f, a: None, rank=0)
    return Check(name="x", direction="min", default=0.1, help="x", **said, **kw)


def test_a_check_unit_takes_the_reader_of_its_scope_and_a_directed_field():
    with pytest.raises(ValueError, match="takes read_levels"):
        _unit(scope="level", read=lambda m, cfg: None)
    with pytest.raises(ValueError, match="takes read"):
        _unit()
    with pytest.raises(ValueError, match="starts with min_ or max_"):
        _unit(read=lambda m, cfg: None, field="x_spread")
    assert _unit(read=lambda m, cfg: None).field == "min_x"  # min_ or max_ + the name


def test_api_keywords_override_the_config(make_ckpt):
    ckpt = make_ckpt("random")
    base = GateConfig(min_spread_ratio=100.0)
    assert not geodiag.check(ckpt, config=base, n_permutations=10).passed
    # None is "not given": the config's value stands
    assert not geodiag.check(ckpt, config=base, min_spread_ratio=None, n_permutations=10).passed
    assert geodiag.check(ckpt, config=base, min_spread_ratio=0.5, n_permutations=10).passed
    with pytest.raises(TypeError):
        geodiag.check(ckpt, min_spread_ratioo=0.5)


def test_report_threshold_lines_come_from_the_table():
    from geodiag.outputs.report.figures import _trajectory_panels

    class Report:
        gate_config = GateConfig(max_mean_cosine=0.5)
        trajectories = []

    panels = {attr: t for _, attr, _, t in _trajectory_panels(Report())}
    assert panels == {
        "effective_rank_ratio": 0.1,
        "spread_relative": 0.05,
        "mean_pairwise_cosine": 0.5,
    }
