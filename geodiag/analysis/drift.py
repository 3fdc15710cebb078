"""Measure a pair: per-token cosine and structure RSA between two checkpoints with the
same new tokens (``geodiag drift``; a GGUF file as the second adds the quantization
findings)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import NamedTuple

import numpy as np

from geodiag.analysis.options import AnalyzeOptions
from geodiag.analysis.reports import DriftReport
from geodiag.analysis.rows import MatrixRows, float32_at_scale, new_rows, selected_rows
from geodiag.errors import InputError
from geodiag.io.checkpoint import Checkpoint, Matrix, open_checkpoint
from geodiag.io.sources.options import ReadOptions
from geodiag.metrics.blas import blas_threads


def measure_drift(
    before: str | Path,
    after: str | Path,
    read: ReadOptions | None = None,
    opts: AnalyzeOptions | None = None,
) -> list[DriftReport]:
    """Per-token cosine and structure RSA between two checkpoints with the same new tokens."""
    opts = opts or AnalyzeOptions()
    # Drift is the movement between the two: neither is measured from a reference.
    read = dataclasses.replace(read or ReadOptions(), reference=None, auto_reference=False)
    a = open_checkpoint(before, read)
    b = open_checkpoint(after, deployed_read(read, a, Path(after)))
    return drift_checkpoints(a, b, before, after, opts)


def drift_checkpoints(
    a: Checkpoint,
    b: Checkpoint,
    before: str | Path,
    after: str | Path,
    opts: AnalyzeOptions,
    held: tuple[list[MatrixRows], list[MatrixRows]] | None = None,
) -> list[DriftReport]:
    """:func:`measure_drift` on opened checkpoints; ``held``: the rows measuring each read
    (:func:`geodiag.analysis.checkpoint.measure_checkpoint`), used instead of reading them
    again where every new row was kept."""
    if a.new.tokens != b.new.tokens or not np.array_equal(a.new.ids, b.new.ids):
        raise InputError(
            after, f"new tokens differ from those of {before}: drift needs the same vocabulary"
        )
    ha, hb = held if held is not None else ([], [])
    out = []
    with blas_threads(1):
        for i, (ma, mb) in enumerate(zip(a.matrices, b.matrices, strict=False)):
            rows = (_held(ha, i, ma), _held(hb, i, mb))
            out.append(_drift_matrix(_Pair(a, b, ma, mb, before, after), opts, rows))
    return out


def _held(held: list[MatrixRows], i: int, matrix: Matrix) -> np.ndarray | None:
    """The new rows of ``matrix`` as read before, when all were kept (drift needs every one)."""
    if i < len(held) and held[i].matrix.tensor == matrix.tensor and held[i].all_kept:
        return held[i].rows
    return None


class _Pair(NamedTuple):
    """One matrix of two checkpoints, and how the user named them (for messages)."""

    a: Checkpoint
    b: Checkpoint
    ma: Matrix
    mb: Matrix
    before: object
    after: object


def _is_gguf(after: Path) -> bool:
    """Whether ``after`` is a GGUF file: on disk as the format registry recognises it, by
    its bytes (a store's digest-named blob) or its name; a URL by its ``.gguf`` name, the
    only one under which a GGUF is read by URL."""
    if not after.is_file():
        return after.suffix == ".gguf"
    from geodiag.io.formats import gguf, gguf_blob
    from geodiag.io.formats.registry import recognise

    found = recognise(after)
    return found is not None and found[0] in (gguf.FORMAT, gguf_blob.FORMAT)


def deployed_read(read: ReadOptions, a: Checkpoint, after: Path) -> ReadOptions:
    """A GGUF file converted from ``a`` keeps its token ids: without a sidecar of its own
    it is read with ``a``'s (levels, codes), checked against its token list."""
    from dataclasses import replace

    from geodiag.io.vocabulary.sidecar import FILENAME

    own = after.parent / FILENAME
    theirs = (a.path if a.path.is_dir() else a.path.parent) / FILENAME
    if read.sidecar or own.is_file() or not theirs.is_file() or not _is_gguf(after):
        return read
    return replace(read, sidecar=theirs)


def _drift_matrix(
    pair: _Pair, opts: AnalyzeOptions, held: tuple[np.ndarray | None, np.ndarray | None]
) -> DriftReport:
    from geodiag.metrics.drift import drift

    a, b, ma, mb, before, after = pair
    if ma.dim != mb.dim:
        raise InputError(after, f"'{mb.tensor}' has {mb.dim} dims, '{before}' has {ma.dim}")
    deployed = getattr(b.store, "dequantizes", False)  # a deployed file: what export did
    if float32_at_scale(len(a.new.ids), ma) and not deployed:
        return _streamed_drift_matrix(pair, opts, held)
    # The rows as new_rows reads them, all kept (else read, and the error below raised).
    ra, ka = (held[0], np.ones(len(held[0]), bool)) if held[0] is not None else new_rows(a, ma)
    rb, kb = (held[1], np.ones(len(held[1]), bool)) if held[1] is not None else new_rows(b, mb)
    if not (ka.all() and kb.all()):
        raise InputError(after, "drift needs every new row finite in both checkpoints")
    kw = dict(n_permutations=opts.n_permutations, seed=opts.seed, max_items=opts.rsa_max_items)
    levels = {}
    if a.new.level_index is not None:
        for li, name in enumerate(a.new.level_names):
            sel = a.new.level_index == li
            levels[name] = drift(selected_rows(ra, sel), selected_rows(rb, sel), **kw)
    whole = drift(ra, rb, **kw)
    found = None
    if deployed:
        from geodiag.metrics.quantization import quantization_findings

        books = a.codebooks or b.codebooks
        masks = {n: a.new.level_index == li for li, n in enumerate(a.new.level_names)}
        found = quantization_findings(
            ra,
            rb,
            dtype=mb.dtype,
            tokens=a.new.tokens,
            structure=whole.structure_rsa,
            levels={n: (masks[n], book) for n, book in books.items()},
            **kw,
        )
    return DriftReport(str(before), str(after), ma.role, len(ra), whole, levels, found)


def _streamed_drift_matrix(
    pair: _Pair, opts: AnalyzeOptions, held: tuple[np.ndarray | None, np.ndarray | None]
) -> DriftReport:
    """_drift_matrix at scale: both checkpoints' rows a block at a time, from the rows
    measuring them read when held (float32 where exact, as read here), else read."""
    from geodiag.metrics.drift import streamed_drift

    a, b, ma, mb, before, after = pair
    ids = a.new.ids

    def reader(ckpt: Checkpoint, matrix: Matrix, rows: np.ndarray | None):
        if rows is not None:  # every row kept, so finite
            return lambda pos: rows[pos]

        def read(pos: np.ndarray) -> np.ndarray:
            rows = ckpt.read_rows(matrix, ids[pos], float32=True)
            bad = ~np.isfinite(rows).all(axis=1)
            if bad.any():
                raise InputError(
                    ckpt.store.file_of(matrix.tensor),
                    f"new-token rows of '{matrix.tensor}' hold NaN/Inf (ids "
                    f"{ids[pos][bad][:5].tolist()}): drift needs every new row finite in both "
                    "checkpoints",
                )
            return rows

        return read

    subsets = {}
    if a.new.level_index is not None:
        subsets = {
            name: np.flatnonzero(a.new.level_index == li)
            for li, name in enumerate(a.new.level_names)
        }
    whole, levels = streamed_drift(
        len(ids),
        reader(a, ma, held[0]),
        reader(b, mb, held[1]),
        subsets,
        n_permutations=opts.n_permutations,
        seed=opts.seed,
        max_items=opts.rsa_max_items,
    )
    return DriftReport(str(before), str(after), ma.role, len(ids), whole, levels, None)
