"""The help style of both command lines, ``geodiag`` and ``gti``: one :class:`App` class.

- Plain text help: rich markup would eat the bracketed defaults ("[0.1]", "[off]") and
  "[tool.geodiag]" of the option texts, and a pipe or a CI log gets no box drawing.
- Options grouped in panels (typer's ``rich_help_panel``, set on a config class with
  ``HELP_PANEL`` or on a field, :mod:`geodiag.settings`), in the order of :data:`PANELS`;
  options of no panel, ``--help`` among them, last under "Options".
- One example per command (``example=``: shown under "Example:", as written).
- The command list shows each command's summary whole, never cut with "...".
- Shell completion (``--install-completion``, ``--show-completion``).
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from geodiag.settings import PANELS

OTHER = "Options"  # no panel: --help, --version


def summary(text: str | None) -> str:
    """What a command list shows of a command's help: its first paragraph, whole (click's
    would be cut to one line with "..."). Keep it to a sentence, or give short_help."""
    return " ".join((text or "").strip().split("\n\n")[0].split())


class PanelCommand(TyperCommand):
    """A command whose --help lists its options panel by panel, then its example."""

    def format_options(self, ctx: Any, formatter: Any) -> None:
        arguments, panels = [], {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                arguments.append(record)
            else:
                panel = getattr(param, "rich_help_panel", None) or OTHER
                panels.setdefault(panel, []).append(record)
        if arguments:
            with formatter.section("Arguments"):
                formatter.write_dl(arguments)
        known = [p for p in PANELS if p in panels]
        others = [p for p in panels if p not in PANELS and p != OTHER]
        for panel in [*known, *others, OTHER]:
            if panel in panels:
                with formatter.section(panel):
                    formatter.write_dl(panels[panel])

    def format_epilog(self, ctx: Any, formatter: Any) -> None:
        if self.epilog:  # the example, as written (click would re-wrap it)
            with formatter.section("Example"):
                for line in self.epilog.strip().splitlines():
                    formatter.write(f"{'':>{formatter.current_indent}}{line}\n")


class PanelGroup(TyperGroup):
    """A group whose command list shows each command's summary, wrapped, not cut."""

    def format_options(self, ctx: Any, formatter: Any) -> None:
        PanelCommand.format_options(self, ctx, formatter)  # type: ignore[arg-type]
        self.format_commands(ctx, formatter)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.short_help or summary(cmd.help)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def format_epilog(self, ctx: Any, formatter: Any) -> None:
        PanelCommand.format_epilog(self, ctx, formatter)  # type: ignore[arg-type]


class App(typer.Typer):
    """A typer app in the help style of this module; ``command(..., example=...)``."""

    def __init__(self, *, example: str | None = None, **kwargs: Any) -> None:
        settings = dict(
            cls=PanelGroup,
            no_args_is_help=True,
            add_completion=True,
            pretty_exceptions_enable=False,
            rich_markup_mode=None,
            epilog=example,
        )
        super().__init__(**{**settings, **kwargs})

    def command(self, name: str | None = None, *, example: str | None = None, **kwargs: Any):
        return super().command(name, cls=PanelCommand, epilog=example, **kwargs)

    def add_typer(self, app: typer.Typer, **kwargs: Any) -> None:
        """A sub-app (``gti data``): an :class:`App` too, so that it looks the same."""
        if not isinstance(app, App):
            raise TypeError("a sub-command group is an App (geodiag.command_line)")
        super().add_typer(app, **kwargs)


def leaf_commands(group: Any, prog: str):
    """(``"prog sub name"``, click command) of every command under the click ``group``."""
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):
            yield from leaf_commands(cmd, f"{prog} {name}")
        else:
            yield f"{prog} {name}", cmd
