"""Lines as a terminal shows them: wrapped to its width with a hanging indent, and the
statuses in colour, only when stdout is a terminal. Piped or redirected (a CI log,
``| grep``), each line stays whole and plain: one finding per line.

Lines arrive escaped (:func:`geodiag.escape.terminal`). Each piece of a wrapped line is
escaped again (idempotent), so a name holding ``::`` cannot begin a continuation line as a
workflow command. Colour goes on last, around geodiag's own words only (``PASS``,
``[fail]``, the summary's count), never inside a name from a file. ``NO_COLOR`` (set and
not empty, https://no-color.org) and ``--no-color`` turn it off.
"""

from __future__ import annotations

import os
import re
import shutil
import textwrap
from dataclasses import dataclass
from typing import TextIO

from geodiag.escape import terminal

# SGR colours of a status: red, yellow, green, dim.
COLORS = {"fail": "31", "warn": "33", "pass": "32", "skip": "2"}
_TAG = re.compile(r"^(\s*)\[(fail|warn|pass|skip)\s*\]")  # a check's line
_HEADER = re.compile(r"^(\S.*: )(PASS|FAIL)$")  # a checkpoint's first line
_SUMMARY = re.compile(r"^(\d+ of \d+ failed|all \d+ passed)")  # the last line
# What a continuation hangs under: a status tag or a short label ("verdict: ").
_LABEL = re.compile(r"(\[\w+\s*\] |[a-z][a-z ]{0,15}: )")
MIN_TEXT = 30  # a hanging indent leaves at least this many columns of text


@dataclass(frozen=True)
class Console:
    """How to print: ``width`` (None: lines whole), ``color``."""

    width: int | None = None
    color: bool = False

    @classmethod
    def of(cls, stream: TextIO, *, no_color: bool = False) -> Console:
        """Wrap and colour for a terminal; nothing for a pipe or a file."""
        try:
            tty = stream.isatty()
        except (AttributeError, ValueError):  # closed, or not a real stream
            tty = False
        if not tty:
            return cls()
        color = not no_color and not os.environ.get("NO_COLOR")
        return cls(shutil.get_terminal_size().columns, color)

    def show(self, text: str) -> str:
        """``text`` (escaped lines) as this console prints it."""
        lines = [piece for line in text.split("\n") for piece in wrap(line, self.width)]
        return "\n".join(paint(line) if self.color else line for line in lines)


def wrap(line: str, width: int | None) -> list[str]:
    """``line`` in pieces of at most ``width`` columns (a word longer than that is left
    whole), each continuation under the text after its tag or label."""
    if width is None or len(line) <= width:
        return [line]
    body = line.lstrip(" ")
    lead = len(line) - len(body)
    label = _LABEL.match(body)
    hang = lead + (len(label.group()) if label else 2)
    hang = min(hang, max(lead, width - MIN_TEXT))
    pieces = textwrap.wrap(
        body,
        width=width,
        initial_indent=" " * lead,
        subsequent_indent=" " * hang,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return [terminal(p) for p in pieces] or [line]


def _sgr(text: str, status: str) -> str:
    return f"\x1b[{COLORS[status]}m{text}\x1b[0m"


def paint(line: str) -> str:
    """One line with its status words in colour (a tag, a header's verdict, the summary)."""
    if m := _TAG.match(line):
        return m.group(1) + _sgr(m.group()[len(m.group(1)) :], m.group(2)) + line[m.end() :]
    if m := _HEADER.match(line):
        return m.group(1) + _sgr(m.group(2), m.group(2).lower())
    if m := _SUMMARY.match(line):
        status = "fail" if "failed" in m.group() and not m.group().startswith("0 ") else "pass"
        return _sgr(m.group(), status) + line[m.end() :]
    return line
