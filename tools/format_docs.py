"""The files derived from the format registry (``geodiag.io.formats.registry.formats``):
``.pre-commit-hooks.yaml``'s ``files:`` patterns (from ``geodiag.precommit.HOOK_FILES``:
every format's files and those read beside them) and docs/stacks.md's table of formats
(:func:`~geodiag.io.formats.registry.formats_table`, between marker lines).
``tests/tools/test_format_docs.py`` fails when either file is stale. After adding or
changing a format::

    python -m tools.format_docs        # rewrites both files in place
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from geodiag.io.formats.registry import formats_table
from geodiag.precommit import HOOK_FILES
from tools.generated import rewrite

ROOT = Path(__file__).resolve().parents[1]
REGENERATE = "python -m tools.format_docs"
HOOKS = ".pre-commit-hooks.yaml"
TABLE = "docs/stacks.md"
BEGIN = f"<!-- BEGIN formats: generated from geodiag.io.formats.registry ({REGENERATE}) -->"
END = "<!-- END formats -->"


def render_hooks(text: str) -> str:
    """``text`` (the hooks file) with each hook's ``files:`` line its ``HOOK_FILES``
    pattern, a plain YAML scalar (quoted, as JSON, only if it held what YAML reads
    otherwise: ``": "``, ``" #"``)."""
    for hook, pattern in HOOK_FILES.items():
        block = re.compile(
            rf"(^- id: {re.escape(hook)}\n(?:^[ \t]+.*\n|^#.*\n)*?^[ \t]+files: ).*$", re.M
        )
        found = block.search(text)
        if found is None:
            raise ValueError(f"{HOOKS}: no files: line in hook {hook}")
        plain = ": " not in pattern and " #" not in pattern
        text = (
            text[: found.end(1)] + (pattern if plain else json.dumps(pattern)) + text[found.end() :]
        )
    return text


def render_table(text: str) -> str:
    """``text`` (docs/stacks.md) with the table between the markers rendered anew."""
    pattern = re.compile(rf"^{re.escape(BEGIN)}\n.*?^{re.escape(END)}\n", re.M | re.S)
    found = pattern.search(text)
    if found is None:
        raise ValueError(f"{TABLE}: no block between '{BEGIN}' and '{END}'")
    block = f"{BEGIN}\n{formats_table()}{END}\n"
    return text[: found.start()] + block + text[found.end() :]


RENDERS = {HOOKS: render_hooks, TABLE: render_table}


def main(root: Path = ROOT) -> int:
    """Rewrite the derived parts in place; prints the files it changed."""
    return rewrite(root, RENDERS)


if __name__ == "__main__":
    sys.exit(main())
