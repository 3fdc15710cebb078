"""Every repository path the docs name exists: a file moved (issue 30 moved most of
geodiag) leaves no page pointing at its old place."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
PATH = re.compile(
    r"(?<![\w/.-])((?:geodiag|gti|tests|bench|tools|reports|configs|scripts|docs)/"
    r"[\w/.-]*\w\.(?:py|md|toml|json|yml|jsonl))"
)
# Files the commands write, named as outputs: not in the repository.
OUTPUTS = {"reports/demo.json", "reports/report.json"}


def named_paths(text: str) -> list[str]:
    """Repository paths in a page; ``NAME``-style placeholders are not paths."""
    return [p for p in PATH.findall(text) if p not in OUTPUTS and not re.search(r"[A-Z]{3,}", p)]


def test_the_pattern_finds_paths_and_skips_placeholders():
    text = "see `geodiag/io/formats/store.py`, gti/presets/NAME.toml and (tests/docs/x.py)."
    assert named_paths(text) == ["geodiag/io/formats/store.py", "tests/docs/x.py"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_named_path_exists(page):
    missing = [p for p in named_paths(page.read_text(encoding="utf-8")) if not (ROOT / p).exists()]
    assert missing == [], f"{page.name} names paths that do not exist"
