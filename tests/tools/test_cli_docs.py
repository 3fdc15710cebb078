"""docs/cli.md is rendered from the commands (tools.cli_docs): it is never stale, and it
shows every option of every command."""

from __future__ import annotations

from pathlib import Path

import typer

from geodiag.cli import app as geodiag_app
from gti.cli import app as gti_app
from tools import cli_docs, gate_docs

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / cli_docs.PAGE


def _commands(prog: str, group) -> dict:
    out = {}
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):
            out.update(_commands(f"{prog} {name}", cmd))
        else:
            out[f"{prog} {name}"] = cmd
    return out


def test_committed_page_is_rendered_from_the_commands():
    assert PAGE.read_text(encoding="utf-8") == cli_docs.render(), (
        f"{cli_docs.PAGE} is stale: run `{cli_docs.REGENERATE}`"
    )


def test_the_gate_block_is_the_one_gate_docs_renders():
    text = cli_docs.render()
    assert gate_docs.render(text, cli_docs.PAGE) == text


def test_every_command_and_option_is_on_the_page():
    text = cli_docs.render()
    commands = {
        **_commands("geodiag", typer.main.get_command(geodiag_app)),
        **_commands("gti", typer.main.get_command(gti_app)),
    }
    assert "geodiag check" in commands and "gti study run" in commands
    for prog, cmd in commands.items():
        assert f"`{prog}`" in text, prog
        for p in cmd.params:
            for opt in getattr(p, "opts", []):
                if opt.startswith("-") and opt != "--help":
                    assert f"`{opt}" in text, (prog, opt)


def test_main_rewrites_a_stale_page(tmp_path, capsys):
    (tmp_path / "docs").mkdir()
    (tmp_path / cli_docs.PAGE).write_text("stale\n", encoding="utf-8")
    cli_docs.main(tmp_path)
    assert (tmp_path / cli_docs.PAGE).read_text(encoding="utf-8") == cli_docs.render()
    assert "rewrote" in capsys.readouterr().out
    cli_docs.main(tmp_path)
    assert capsys.readouterr().out == ""
