"""action.yml's threshold inputs and docs/cli.md's table of check flags, from the gate's table.

GitHub reads action.yml as it is committed, so the part that follows the thresholds (an
input each, its ``env:`` line, the flag it becomes) is rendered here from
:data:`geodiag.gate.checks.SETTINGS` (the checks and the rules) and written between marker lines; so is the table of ``geodiag check``
flags in docs/cli.md (the rest of that page: :mod:`tools.cli_docs`). ``tests/geodiag/gate/test_gate_table.py`` fails when either file
is stale. After adding or changing a check::

    python -m tools.gate_docs        # rewrites action.yml and docs/cli.md in place
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

from geodiag.gate.checks import SETTINGS, Setting
from tools.generated import rewrite

ROOT = Path(__file__).resolve().parents[1]
REGENERATE = "python -m tools.gate_docs"


def input_name(c: Setting) -> str:
    return c.flag.removeprefix("--")


def env_name(c: Setting) -> str:
    return "GEODIAG_" + c.field.upper()


def action_inputs(c: Setting) -> list[str]:
    # JSON strings are YAML double-quoted scalars: a help text may hold ": ".
    description = json.dumps(f"{c.help} (geodiag default {c.default_text}).")
    return [
        f"{input_name(c)}:",
        f"  description: {description}",
        "  required: false",
        '  default: ""',
    ]


def action_env(c: Setting) -> list[str]:
    return [f"{env_name(c)}: ${{{{ inputs.{input_name(c)} }}}}"]


def action_args(c: Setting) -> list[str]:
    return [f'[ -n "${env_name(c)}" ] && args+=({c.flag} "${env_name(c)}")']


FLAG_TABLE_HEAD = ["| flag | default | meaning |", "|---|---|---|"]


def cli_flags(c: Setting) -> list[str]:
    default = "off" if c.default is None else f"`{c.default_text}`"
    return [f"| `{c.flag} {c.metavar}` | {default} | {c.help} |"]


# name -> (file, how one check renders, the marker's comment syntax, lines before, after)
BLOCKS: dict[str, tuple[str, Callable[[Setting], list[str]], str, list[str], list[str]]] = {
    "inputs": ("action.yml", action_inputs, "#", [], []),
    "env": ("action.yml", action_env, "#", [], []),
    "args": ("action.yml", action_args, "#", [], []),
    # The blank line ends the table before the comment.
    "flags": ("docs/cli.md", cli_flags, "<!--", FLAG_TABLE_HEAD, [""]),
}


def _markers(name: str, syntax: str) -> tuple[str, str]:
    begin = f"BEGIN gate {name}: generated from geodiag.gate.checks ({REGENERATE})"
    if syntax == "#":
        return f"# {begin}", f"# END gate {name}"
    return f"<!-- {begin} -->", f"<!-- END gate {name} -->"


def rows(lines_of: Callable[[Setting], list[str]]) -> list[str]:
    return [line for c in SETTINGS for line in lines_of(c)]


def render(text: str, filename: str) -> str:
    """``text`` (the content of ``filename``) with each generated block rendered anew."""
    for name, (file, lines_of, syntax, before, after) in BLOCKS.items():
        if file != filename:
            continue
        begin, end = _markers(name, syntax)
        pattern = re.compile(
            rf"^(?P<indent>[ \t]*){re.escape(begin)}\n.*?^[ \t]*{re.escape(end)}\n",
            re.MULTILINE | re.DOTALL,
        )
        found = pattern.search(text)
        if found is None:
            raise ValueError(f"{filename}: no block between '{begin}' and '{end}'")
        pad = found["indent"]
        body = [pad + line if line else "" for line in before + rows(lines_of) + after]
        block = "\n".join([pad + begin, *body, pad + end]) + "\n"
        text = text[: found.start()] + block + text[found.end() :]
    return text


def main(root: Path = ROOT) -> int:
    """Rewrite the generated blocks in place; prints the files it changed."""
    files = sorted({block[0] for block in BLOCKS.values()})
    return rewrite(root, {f: lambda old, f=f: render(old, f) for f in files})


if __name__ == "__main__":
    sys.exit(main())
