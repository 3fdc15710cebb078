"""The help of both command lines (geodiag.command_line): options in panels, one example
per command that parses, summaries whole, counts as integers, completion."""

from __future__ import annotations

import shlex

import pytest
import typer
from typer.testing import CliRunner

from geodiag.cli import app as geodiag_app
from geodiag.command_line import OTHER, leaf_commands, summary
from geodiag.errors import InputError
from geodiag.gate.checks import COUNTS, load_config
from geodiag.settings import PANELS

runner = CliRunner()
COMMON = {"help", "version", "install_completion", "show_completion"}


GEODIAG = list(leaf_commands(typer.main.get_command(geodiag_app), "geodiag"))


@pytest.mark.parametrize("prog,cmd", GEODIAG, ids=[p for p, _ in GEODIAG])
def test_every_geodiag_option_is_in_a_panel(prog, cmd):
    loose = [
        p.name
        for p in cmd.params
        if p.param_type_name == "option"
        and p.name not in COMMON
        and getattr(p, "rich_help_panel", None) not in PANELS
    ]
    assert not loose, f"{prog}: options in no panel of {PANELS}: {loose}"


def example_parses(prog, cmd):
    """The example is a real command line: its options exist and take the values given."""
    assert cmd.epilog, f"{prog} has no example"
    words = shlex.split(cmd.epilog.strip())
    n = len(prog.split())
    assert words[:n] == prog.split(), f"{prog}'s example runs {words[:n]}"
    cmd.make_context(prog, words[n:])  # raises click's UsageError on an unknown option


@pytest.mark.parametrize("prog,cmd", GEODIAG, ids=[p for p, _ in GEODIAG])
def test_every_command_has_an_example_that_parses(prog, cmd):
    example_parses(prog, cmd)


def test_check_help_groups_and_shows_the_example():
    res = runner.invoke(geodiag_app, ["check", "--help"], terminal_width=80)
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    headings = [line[:-1] for line in lines if line[:1].isalpha() and line.endswith(":")]
    assert headings == ["Arguments", *PANELS, OTHER, "Example"]
    example = res.output.split("Example:\n", 1)[1].strip()
    assert example == typer.main.get_command(geodiag_app).commands["check"].epilog
    assert max(len(line) for line in res.output.splitlines()) <= 80


def summaries_are_whole(app, prog):
    """The command list shows each summary whole (click cuts it with '...' to one line)."""
    res = runner.invoke(app, ["--help"], terminal_width=80)
    assert res.exit_code == 0, res.output
    listed = " ".join(res.output.split("Commands:", 1)[1].split())
    for name, cmd in typer.main.get_command(app).commands.items():
        said = cmd.short_help or summary(cmd.help)
        assert said.endswith("."), f"{prog} {name}: {said!r}"
        assert f"{name} {said}" in listed, f"{prog} {name}"
    assert "..." not in listed
    assert "--install-completion" in res.output  # shell completion, on both


def test_top_level_summaries_are_whole_sentences():
    summaries_are_whole(geodiag_app, "geodiag")


def test_summary():
    assert summary("One. Two.") == "One. Two."
    assert summary("A line\nthat wraps (e.g. this).\n\nMore.") == "A line that wraps (e.g. this)."


def test_counts_take_integers(tmp_path):
    counts = {"max_untrained_tokens", "untrained_uses_to_fail", "max_vocabulary_disagreements"}
    assert counts == COUNTS
    res = runner.invoke(geodiag_app, ["check", "x", "--max-untrained-tokens", "2.5"])
    assert res.exit_code == 2
    assert "'--max-untrained-tokens': '2.5' is not a valid int" in res.output
    help_text = runner.invoke(geodiag_app, ["check", "--help"], terminal_width=80).output
    assert "--max-untrained-tokens K" in help_text and "<float>" not in help_text
    config = tmp_path / "gate.toml"
    config.write_text("max_untrained_tokens = 3.0\nmax_mean_cosine = 0.8\n")
    assert load_config(config) == {"max_untrained_tokens": 3, "max_mean_cosine": 0.8}
    assert isinstance(load_config(config)["max_untrained_tokens"], int)
    config.write_text("max_untrained_tokens = 2.5\n")
    with pytest.raises(InputError, match="is a count, got 2.5"):
        load_config(config)
