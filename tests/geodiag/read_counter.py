"""Counting what a test's checkpoints hand out: every row of every SafetensorsFile read,
and every file opened (shared by the tests that a checkpoint is read once)."""

from __future__ import annotations

from collections import Counter

import numpy as np

from geodiag.io.formats.safetensors import SafetensorsFile

EMB = "model.embed_tokens.weight"


def count_reads(monkeypatch) -> Counter:
    """Counter of (folder name, tensor, row id) over every row read from now on, with
    ``.opened``: a Counter of the files opened (by path)."""
    counts: Counter = Counter()
    counts.opened = Counter()
    read_rows, read_block, init = (
        SafetensorsFile.read_rows,
        SafetensorsFile.read_block,
        SafetensorsFile.__init__,
    )

    def rows(self, name, ids, float32=False):
        counts.update((self.path.parent.name, name, int(i)) for i in np.asarray(ids))
        return read_rows(self, name, ids, float32)

    def block(self, name, start, stop, float32=False):
        counts.update((self.path.parent.name, name, i) for i in range(start, stop))
        return read_block(self, name, start, stop, float32)

    def opened(self, path):
        init(self, path)
        counts.opened[str(self.path)] += 1

    monkeypatch.setattr(SafetensorsFile, "read_rows", rows)
    monkeypatch.setattr(SafetensorsFile, "read_block", block)
    monkeypatch.setattr(SafetensorsFile, "__init__", opened)
    return counts


def rows_read(counts: Counter, folder: str, tensor: str) -> Counter:
    """Row id -> times read, for one tensor of the files in ``folder``."""
    return Counter({i: n for (f, t, i), n in counts.items() if f == folder and t == tensor})
