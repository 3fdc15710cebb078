"""Every relative link of the README and the docs/ pages (and the reports' READMEs they
point into) names a file that exists, and an #anchor names a heading of that page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(
    [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "configs" / "README.md"]
    + list((ROOT / "docs").glob("*.md"))
    + list((ROOT / "reports").glob("*/README.md"))
)
# [text](target) and ![alt](target); a target ends at whitespace or ")"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)


def links(text: str) -> list[str]:
    text = FENCE.sub("", text)
    text = re.sub(r"`[^`\n]*`", "", text)  # inline code is not a link
    return LINK.findall(text)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, re.MULTILINE):
        s = slug(heading)
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def test_slug_follows_github():
    assert slug("`geodiag check`") == "geodiag-check"
    assert slug("What the gate catches, and why one number is not enough") == (
        "what-the-gate-catches-and-why-one-number-is-not-enough"
    )
    assert slug("During training: `GeodiagCallback`") == "during-training-geodiagcallback"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    text = page.read_text(encoding="utf-8")
    broken = []
    for target in links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading with that anchor")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_check_finds_links():
    assert links("see [a](b.md#c), ![x](img.png) and `[no](link)`") == ["b.md#c", "img.png"]


def test_the_pypi_description_has_no_relative_links():
    """PyPI resolves relative links and images against nothing: docs/pypi.md, the long
    description, has none (README.md, with its picture, is the repository's page)."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["readme"] == "docs/pypi.md"
    text = (ROOT / project["readme"]).read_text(encoding="utf-8")
    assert all(re.match(r"^https://", t) for t in links(text)), links(text)
    assert "<img" not in text
