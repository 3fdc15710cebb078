"""New rows at scale are held as float32 (geodiag.analysis.rows.FLOAT64_ROWS_MAX_ELEMENTS): the
stored values exactly, in half the memory, with every sum still in float64.

Reference: the same functions on the same values converted to float64 first (the path
every smaller checkpoint takes). Both compute in float64 from identical inputs; only the
order of some sums differs (a block of 4,096 rows at a time against one product). A
float64 sum of n terms moves by at most ~n eps of its magnitude, n <= 60,000 here, so
~1.3e-11 relative; the spectra's figures inherit that times the Gram matrix's
conditioning over the eigenvalues that enter them. RTOL = 1e-9 leaves a factor of ~100.
Discrete results (groups, findings, token lists, digests) must be equal.

Memory: tracemalloc sees numpy's allocations. A float64 copy of the rows would be twice
their float32 bytes, so a peak below the float32 bytes themselves proves none was made.
"""

from __future__ import annotations

import dataclasses
import json
import tracemalloc

import numpy as np
import pytest

from geodiag.analysis import rows as analysis_rows
from geodiag.analysis.checkpoint import measure_checkpoint
from geodiag.analysis.drift import measure_drift
from geodiag.analysis.options import AnalyzeOptions
from geodiag.analysis.rows import new_rows
from geodiag.io.checkpoint import open_checkpoint
from geodiag.io.formats.safetensors import SafetensorsFile, save_file
from geodiag.io.sources.options import ReadOptions
from geodiag.jsonio import dumps
from geodiag.metrics.cosine import level_cosine
from geodiag.metrics.drift import drift, streamed_drift
from geodiag.metrics.geometry import row_norms, spread, summarize
from geodiag.metrics.rsa import rsa
from geodiag.metrics.untrained import identical_groups

# rsa()'s sample settings have no defaults (callers pass them; AnalyzeOptions holds
# geodiag's): the tests use geodiag's.
SAMPLE = dict(seed=0, max_items=1000)

RTOL = 1e-9


def _rows32(n: int = 60_000, d: int = 80, seed: int = 0) -> np.ndarray:
    """A shared offset, a few strong directions and noise: a conditioned, realistic block."""
    rng = np.random.default_rng(seed)
    low = rng.normal(size=(n, 4)) @ rng.normal(size=(4, d)) * 0.05
    return (0.3 + low + rng.normal(size=(n, d)) * 0.01).astype(np.float32)


def _close(a, b, path: str = "") -> None:
    """a and b equal, floats to RTOL (an absolute floor of 1e-12 for values near 0)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _close(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (u, v) in enumerate(zip(a, b, strict=True)):
            _close(u, v, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert a == pytest.approx(b, rel=RTOL, abs=1e-12), path
    else:
        assert a == b, path


def _asdict(x) -> dict:
    return json.loads(dumps(dataclasses.asdict(x)))


def _peak_bytes(f) -> int:
    tracemalloc.start()
    try:
        f()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_geometry_of_float32_rows_matches_float64():
    x32 = _rows32()
    x64 = x32.astype(np.float64)
    index = np.repeat(np.arange(3), [20_000, 20_000, 20_000])
    ref = _rows32(20_000, seed=1)
    _close(_asdict(summarize(x32, ref)), _asdict(summarize(x64, ref.astype(np.float64))))
    assert spread(x32) == pytest.approx(spread(x64), rel=RTOL)
    np.testing.assert_array_equal(row_norms(x32), row_norms(x64))  # per row: same sums
    center = x64.mean(axis=0)
    for c in (None, center):
        _close(
            _asdict(level_cosine(x32, index, list("abc"), center=c)),
            _asdict(level_cosine(x64, index, list("abc"), center=c)),
        )


def test_small_float32_rows_are_converted_first():
    """Below the Gram route the exact SVD runs in float64: the figures are the same bits."""
    x32 = _rows32(200, 16)
    assert _asdict(summarize(x32)) == _asdict(summarize(x32.astype(np.float64)))


def test_float32_rows_make_no_float64_copy():
    # Wide rows, as real ones are: the functions' own (n, 16) and (4,096, d) temporaries
    # are then small beside the (n, d) copy this test rules out.
    x32 = _rows32(40_000, 400)
    index = np.repeat(np.arange(3), [14_000, 13_000, 13_000])
    b32 = (x32 + np.float32(1e-3)).astype(np.float32)
    for name, f in (
        ("summarize", lambda: summarize(x32)),
        ("row_norms", lambda: row_norms(x32)),
        ("level_cosine", lambda: level_cosine(x32, index, list("abc"))),
        ("level_cosine centered", lambda: level_cosine(x32, index, list("abc"), center=x32[0])),
        ("identical_groups", lambda: identical_groups(x32, 1e-6)),
        ("drift", lambda: drift(x32, b32, n_permutations=10, **SAMPLE)),
    ):
        peak = _peak_bytes(f)
        assert peak < x32.nbytes, f"{name}: peak {peak} B, rows {x32.nbytes} B"


def test_identical_groups_and_rsa_are_unchanged_in_float32():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(5_000, 40)).astype(np.float32)
    x[100:130] = x[100]  # a planted group of 30 identical rows
    x[4000:4002] = x[4000] + np.float32(1e-7)  # two rows a rounding apart
    x32, x64 = x, x.astype(np.float64)
    for tol in (0.0, 1e-5):
        g32 = identical_groups(x32, tol, seed=1)
        g64 = identical_groups(x64, tol, seed=1)
        assert [g.tolist() for g in g32] == [g.tolist() for g in g64]
    assert [g.tolist() for g in identical_groups(x32, 1e-5, seed=1)][0] == list(range(100, 130))
    book = rng.normal(size=(5_000, 6))
    assert rsa(x32, book, n_permutations=50, **SAMPLE) == rsa(
        x64, book, n_permutations=50, **SAMPLE
    )


def test_drift_of_float32_rows_matches_float64():
    a32 = _rows32(30_000, 40, seed=4)
    b32 = (a32 + np.random.default_rng(5).normal(size=a32.shape) * 0.01).astype(np.float32)
    a32[7] = 0.0  # a zero row: its cosine is undefined in both
    d32 = drift(a32, b32, n_permutations=20, **SAMPLE)
    d64 = drift(a32.astype(np.float64), b32.astype(np.float64), n_permutations=20, **SAMPLE)
    _close(_asdict(d32), _asdict(d64))


def test_streamed_drift_matches_drift_in_memory():
    a = _rows32(40_000, 400, seed=8)  # wide, so the (4,096, d) blocks are small beside it
    b = (a + np.random.default_rng(9).normal(size=a.shape) * 0.02).astype(np.float32)
    levels = {"a": np.arange(0, 12_000), "b": np.arange(12_000, 40_000)}
    kw = dict(n_permutations=30, seed=2, max_items=500)
    for x, y in ((a, b), (a.astype(np.float64), b.astype(np.float64))):
        peak = _peak_bytes(
            lambda x=x, y=y: streamed_drift(len(x), x.__getitem__, y.__getitem__, levels, **kw)
        )
        assert peak < x.nbytes  # neither matrix was copied whole
        whole, per_level = streamed_drift(len(x), x.__getitem__, y.__getitem__, levels, **kw)
        _close(_asdict(whole), _asdict(drift(x, y, **kw)))
        for name, pos in levels.items():
            expected = drift(x[pos], y[pos], **kw)
            _close(_asdict(per_level[name]), _asdict(expected))
            assert per_level[name].structure_rsa == expected.structure_rsa  # the same sample


def test_store_reads_float32_exactly_with_the_same_digest(tmp_path):
    rng = np.random.default_rng(6)
    x = rng.normal(size=(300, 16))
    ids = np.array([5, 3, 3, 299, 100, 101, 102])
    for dtype in ("F32", "BF16", "F16", "F64"):
        path = save_file({"w": x}, tmp_path / f"{dtype}.safetensors", dtype=dtype)
        f64, f32 = SafetensorsFile(path), SafetensorsFile(path)
        r64, r32 = f64.read_rows("w", ids), f32.read_rows("w", ids, float32=True)
        assert r32.dtype == (np.float64 if dtype == "F64" else np.float32)
        np.testing.assert_array_equal(r32.astype(np.float64), r64)
        assert f32.digest.hexdigest() == f64.digest.hexdigest()


@pytest.fixture
def at_scale(monkeypatch):
    """Every checkpoint's rows take the float32 path."""
    monkeypatch.setattr(analysis_rows, "FLOAT64_ROWS_MAX_ELEMENTS", 0)


def _analyses(init, sft) -> dict:
    opts = AnalyzeOptions(n_permutations=50)
    return {
        "init": _asdict(measure_checkpoint(init, opts)),
        "sft": _asdict(measure_checkpoint(sft, opts, read=ReadOptions(reference=str(init)))),
        "drift": [_asdict(d) for d in measure_drift(init, sft, opts=opts)],
    }


def test_analysis_at_scale_matches_the_float64_path(make_ckpt, monkeypatch):
    from geodiag_fixtures import base_rows, planted_new_rows

    base = base_rows()
    init_rows = planted_new_rows("grounded", base)
    init_rows[3:6] = base.mean(axis=0)  # three planted untrained rows
    sft_rows = init_rows + np.random.default_rng(7).normal(size=init_rows.shape) * 0.01
    sft_rows[3:6] = init_rows[3:6]  # ... that never move
    init = make_ckpt(init_rows, name="init", dtype="BF16")
    sft = make_ckpt(sft_rows, name="sft", dtype="BF16", provenance={"stage": "sft"})
    expected = _analyses(init, sft)
    monkeypatch.setattr(analysis_rows, "FLOAT64_ROWS_MAX_ELEMENTS", 0)
    ckpt = open_checkpoint(sft)
    assert new_rows(ckpt, ckpt.matrices[0])[0].dtype == np.float32  # the path taken
    got = _analyses(init, sft)
    _close(got, expected)
    untrained = got["sft"]["matrices"][0]["untrained"]["untrained"]
    assert untrained is not None and untrained["size"] == 3
