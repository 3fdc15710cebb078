"""docs/cli.md, rendered from the commands themselves.

Every table of that page comes from the click objects typer builds for ``geodiag`` and
``gti``: each command's docstring, its arguments and options with their types, defaults
and help texts (the reading options from :class:`geodiag.io.sources.options.ReadOptions`, the
gate's thresholds from :data:`geodiag.gate.checks.CHECKS` through :mod:`tools.gate_docs`).
``tests/tools/test_cli_docs.py`` fails when the committed page is stale. After
changing a command, an option or a help text::

    python -m tools.cli_docs        # rewrites docs/cli.md

typer builds its commands on click (or on a copy of click it vendors), so the objects are
read by their attributes, not their classes.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

from geodiag.gate.checks import THRESHOLDS
from geodiag.io.sources.options import ReadOptions
from tools import gate_docs

ROOT = Path(__file__).resolve().parents[1]
PAGE = "docs/cli.md"
REGENERATE = "python -m tools.cli_docs"

INTRO = f"""\
# Command-line reference

<!-- Generated from the commands' own metadata ({REGENERATE}); edit the help texts in
the code, not this page. tests/tools/test_cli_docs.py fails when it is stale. -->

Every table below is rendered from the commands themselves: their docstrings, and the
types, defaults and help texts of their options. What the commands read and how they
judge it is explained in [stacks.md](stacks.md) (inputs, PEFT, untied heads, GGUF,
verdicts), [gate.md](gate.md) (what each check catches), [report.md](report.md) (the
HTML report) and [metrics.md](metrics.md) (definitions).

**Exit codes** (`geodiag`): `0` ok; `1` a gate check failed, and only that; `2` anything
else that stops the run: bad input or usage, an input that cannot be read, an output
(`--junit`, `--sarif`, `-o`, `$GITHUB_STEP_SUMMARY`) that cannot be written, or a bug (one line on
stderr naming the file and the problem; nothing is written half-way; `GEODIAG_DEBUG=1`
adds the traceback of a bug). A reader that closes stdout early
(`geodiag check ... | head -1`) does not change the code. `gti` commands exit 2 with one
line on bad input, and 2 with the line to install when torch and transformers are
missing.

**Thresholds** of `geodiag check` and `geodiag report` come from, in increasing
priority: the defaults, `[tool.geodiag]` in `./pyproject.toml`, `--config FILE`, flags.
"""

READ_FIELDS = {f.name for f in dataclasses.fields(ReadOptions)}
GATE_FIELDS = set(THRESHOLDS)


def _is_argument(p: Any) -> bool:
    # typer may vendor its own click: compare by what the parameter says, not by class.
    return p.param_type_name == "argument"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _type(p: Any) -> str:
    if getattr(p, "is_flag", False):
        return "flag"
    if getattr(p.type, "choices", None):
        return " \\| ".join(f"`{c}`" for c in p.type.choices)
    name = getattr(p.type, "name", "") or ""
    return {"int range": "int", "float range": "float", "boolean": "flag"}.get(name, name)


def _default(p: Any) -> str:
    d = p.default
    if p.required:
        return "required"
    if d is None or d is False or d == () or callable(d):
        return ""
    if getattr(p, "is_flag", False) and d is True:
        return "on"
    return f"`{_cell(d)}`"


def _name(p: Any) -> str:
    if _is_argument(p):
        dots = "..." if p.nargs == -1 else ""
        return f"`{p.name.upper()}{dots}`"
    opts = [*p.opts, *p.secondary_opts]
    return " / ".join(f"`{o}`" for o in opts)


def _table(params: list[Any]) -> list[str]:
    lines = ["| argument / option | type | default | meaning |", "|---|---|---|---|"]
    for p in params:
        help_text = getattr(p, "help", None) or ""
        lines.append(f"| {_name(p)} | {_type(p)} | {_default(p)} | {_cell(help_text)} |")
    return lines + [""]


def _usage(prog: str, cmd: Any) -> str:
    parts = [prog]
    for p in cmd.params:
        if _is_argument(p):
            parts.append(p.name.upper() + ("..." if p.nargs == -1 else ""))
    if any(not _is_argument(p) for p in cmd.params):
        parts.append("[OPTIONS]")
    return " ".join(parts)


def _visible(cmd: Any) -> list[Any]:
    return [p for p in cmd.params if not getattr(p, "hidden", False) and p.name != "help"]


def _command(prog: str, cmd: Any, level: int, *, geodiag: bool) -> list[str]:
    lines = [f"{'#' * level} `{prog}`", "", "```", _usage(prog, cmd), "```", ""]
    if cmd.help:
        lines += [cmd.help.strip(), ""]
    if cmd.epilog:  # the command's example (geodiag.command_line)
        lines += ["Example:", "", "```", cmd.epilog.strip(), "```", ""]
    params = _visible(cmd)
    own = [p for p in params if not geodiag or p.name not in READ_FIELDS | GATE_FIELDS]
    if own:
        lines += _table(own)
    if geodiag and any(p.name in GATE_FIELDS for p in params):
        begin, end = gate_docs._markers("flags", "<!--")
        lines += ["Gate settings (one per field of `geodiag.gate.checks.GateConfig`):", ""]
        lines += [begin, *gate_docs.FLAG_TABLE_HEAD, *gate_docs.rows(gate_docs.cli_flags)]
        lines += ["", end, ""]
    if geodiag and any(p.name in READ_FIELDS for p in params):
        lines += ["Takes the [reading options](#reading-options).", ""]
    return lines


def _group(prog: str, group: Any, level: int, *, geodiag: bool) -> list[str]:
    lines: list[str] = []
    for name, cmd in group.commands.items():
        if getattr(cmd, "hidden", False):
            continue
        if hasattr(cmd, "commands"):
            lines += [f"{'#' * level} `{prog} {name}`", "", (cmd.help or "").strip(), ""]
            lines += _group(f"{prog} {name}", cmd, level + 1, geodiag=geodiag)
        else:
            lines += _command(f"{prog} {name}", cmd, level, geodiag=geodiag)
    return lines


def _read_options(group: Any) -> list[str]:
    metrics = group.commands["metrics"]
    params = [p for p in _visible(metrics) if p.name in READ_FIELDS]
    return [
        "### Reading options",
        "",
        "Shared by every command that reads a checkpoint (`geodiag.io.sources.options.ReadOptions`;",
        "which rows are new and how they are found: [stacks.md](stacks.md#which-rows-are-new)).",
        "",
        *_table(params),
    ]


def render() -> str:
    import typer

    from geodiag.cli import app as geodiag_app
    from gti.cli import app as gti_app

    geodiag_cli = typer.main.get_command(geodiag_app)
    gti_cli = typer.main.get_command(gti_app)
    lines = [INTRO, "## geodiag", "", (geodiag_cli.help or "").strip(), ""]
    lines += _group("geodiag", geodiag_cli, 3, geodiag=True)
    lines += _read_options(geodiag_cli)
    lines += ["## gti", "", (gti_cli.help or "").strip(), ""]
    lines += _group("gti", gti_cli, 3, geodiag=False)
    text = "\n".join(lines)
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return text.rstrip("\n") + "\n"


def main(root: Path = ROOT) -> int:
    """Rewrite docs/cli.md; prints it when it changed."""
    path = root / PAGE
    new = render()
    if not path.exists() or path.read_text(encoding="utf-8") != new:
        path.write_text(new, encoding="utf-8")
        print(f"rewrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
