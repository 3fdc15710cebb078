"""``gti presets ls`` / ``gti presets cp``: thin typer commands over gti.presets."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from geodiag.command_line import App
from gti.errors import exits_on_bad_input
from gti.presets import HOW, RULE, copy_preset, preset_names, read_preset, summary

presets_app = App(
    help=f"The shipped experiment and study TOMLs. Precedence: {RULE}. {HOW}",
    short_help="The shipped experiment and study TOMLs: list them, copy one to edit.",
)


def entry_point(table: dict) -> str:
    """The command a preset is for: study configs have a ``work`` folder."""
    return "gti study run" if "work" in table else "gti experiment"


def _steps(table: dict, section: str) -> str:
    t = table.get(section, {})
    return f"{t.get('steps', '-')} x {t.get('batch_size', '-')}"


@presets_app.command("ls", example="gti presets ls")
@exits_on_bad_input
def presets_ls() -> None:
    """List the presets: name, command, grounding and SFT steps x batch, what each is for."""
    import shutil
    import textwrap

    width = shutil.get_terminal_size((80, 24)).columns
    for name in preset_names():
        table = read_preset(name)
        typer.echo(
            f"{name:<11} {entry_point(table):<15} grounding {_steps(table, 'grounding'):<10} "
            f"sft {_steps(table, 'sft')}"
        )
        lines = textwrap.wrap(
            summary(name),
            max(width - 1, 40),
            initial_indent="    ",
            subsequent_indent="    ",
            break_on_hyphens=False,
        )
        typer.echo("\n".join(lines))


@presets_app.command("cp", example="gti presets cp demo my-demo.toml")
@exits_on_bad_input
def presets_cp(
    name: Annotated[str, typer.Argument(help="A preset of `gti presets ls`.")],
    dest: Annotated[Path, typer.Argument(help="File to write, or a folder for NAME.toml.")],
) -> None:
    """Copy a preset (its comments included) to edit; refuses to replace a file."""
    typer.echo(str(copy_preset(name, dest)))
