"""The one loop of the generators (tools.gate_docs, tools.format_docs): render each file's
derived parts from the code and rewrite the files that changed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path


def rewrite(root: Path, renders: Mapping[str, Callable[[str], str]]) -> int:
    """Rewrite each ``root / filename`` as ``renders[filename]`` renders its old text;
    prints the files it changed."""
    for filename, render in renders.items():
        path = root / filename
        old = path.read_text(encoding="utf-8")
        new = render(old)
        if new != old:
            path.write_text(new, encoding="utf-8")
            print(f"rewrote {path}")
    return 0
