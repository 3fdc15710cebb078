"""docs/architecture.md's tree names every module of geodiag, gti and tools, each in its
folder, and nothing that is not a module: a module added, moved or deleted fails here
until the map says so."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
TOP = ("geodiag", "gti", "tools")


def tree_modules(text: str) -> set[str]:
    """Module paths named by the page's first code block. A line whose first word ends in
    ``/`` opens a folder at its indentation (two spaces a level); the ``*.py`` words that
    start a line are modules of the folder it sits in; the words after them describe."""
    block = re.search(r"^```\n(.*?)^```", text, re.S | re.M).group(1)
    folders: list[str] = []
    out = set()
    for line in block.splitlines():
        words = line.split()
        if not words:
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 2
        if words[0].endswith("/"):
            folders = [*folders[:depth], words[0].rstrip("/")]
            continue
        for w in words:
            if not re.fullmatch(r"\w+\.py", w):
                break
            out.add("/".join([*folders[:depth], w]))
    return out


def package_modules() -> set[str]:
    found = set()
    for top in TOP:
        for p in (ROOT / top).rglob("*.py"):
            if p.name != "__init__.py" and "__pycache__" not in p.parts:
                found.add(p.relative_to(ROOT).as_posix())
    return found


def test_the_tree_reader_follows_folders_and_stops_at_the_description():
    text = (
        "```\na/\n  x.py y.py   the x and y of a\n  b/\n    z.py here, not words.py\n  w.py\n```\n"
    )
    assert tree_modules(text) == {"a/x.py", "a/y.py", "a/b/z.py", "a/w.py"}


def test_the_map_names_every_module_and_only_modules():
    named = tree_modules(PAGE.read_text(encoding="utf-8"))
    modules = package_modules()
    assert sorted(modules - named) == [], "modules missing from docs/architecture.md"
    assert sorted(named - modules) == [], "docs/architecture.md names modules that do not exist"
