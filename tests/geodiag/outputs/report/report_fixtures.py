"""Helpers shared by the report tests: a set of tiny checkpoints, and an HTML reader."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
from geodiag_fixtures import base_rows, planted_new_rows, write_checkpoint

# (folder, planted kind, sidecar provenance); gti/sft names gti/init as its init checkpoint,
# as `gti sft` writes it: the one drift pair.
CHECKPOINTS = [
    ("mean-init", "mean", {"init_strategy": "mean", "stage": "init", "step": 0, "seed": 0}),
    ("gti-init", "grounded", {"init_strategy": "gti", "stage": "init", "step": 0, "seed": 0}),
    (
        "gti-sft",
        "grounded+sft",
        {
            "init_strategy": "gti",
            "stage": "sft",
            "step": 800,
            "seed": 0,
            "init_checkpoint": "../gti-init",
        },
    ),
    ("random-init", "random", {"init_strategy": "random", "stage": "init", "step": 0, "seed": 0}),
]


def write_set(root: Path) -> list[Path]:
    base = base_rows()
    paths = []
    for folder, kind, prov in CHECKPOINTS:
        if kind == "grounded+sft":
            rows = planted_new_rows("grounded", base)
            rows = rows + np.random.default_rng(7).normal(size=rows.shape) * 0.02
        else:
            rows = planted_new_rows(kind, base)
        paths.append(write_checkpoint(root / folder, rows, base=base, provenance=prov))
    return paths


def strict_json(text: str):
    def no_constants(name):
        raise ValueError(f"non-strict JSON constant {name}")

    return json.loads(text, parse_constant=no_constants)


class Page(HTMLParser):
    """Collects every element with ``data-json`` (pointer, text inside), ids, tags and attributes."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.marked: list[tuple[str, str]] = []
        self.ids: list[str] = []
        self.tags: list[tuple[str, dict]] = []
        self._open: list[list] = []  # [pointer, depth, text parts]
        self._depth = 0
        self.feed(html)
        self.close()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if "id" in a:
            self.ids.append(a["id"])
        if tag in ("meta", "img", "br", "link", "input"):
            return
        self._depth += 1
        if "data-json" in a:
            self._open.append([a["data-json"], self._depth, []])

    def handle_endtag(self, tag):
        if tag in ("meta", "img", "br", "link", "input"):
            return
        if self._open and self._open[-1][1] == self._depth:
            ptr, _, parts = self._open.pop()
            self.marked.append((ptr, "".join(parts).strip()))
        self._depth -= 1

    def handle_data(self, data):
        for entry in self._open:
            entry[2].append(data)
