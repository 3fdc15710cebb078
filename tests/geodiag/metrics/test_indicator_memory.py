"""Issue 50 item 6: the indicators over many new rows hold no (n, d) float64 temporaries
beside the rows themselves (Gemma 3 270M's 6,143 new rows: 30 MiB each). Measured by
tracemalloc (numpy reports its buffers to it), never by time."""

import tracemalloc

import numpy as np

from geodiag.metrics.indicators import (
    COSINE_BLOCK,
    cosines,
    draw_kind,
    principal_directions,
    unused_cosine,
    unused_mean,
    without_component,
)

N, D = 8 * COSINE_BLOCK, 64


def _peak(fn) -> tuple[object, int]:
    """fn()'s result and the bytes it held at most beyond what was live before it."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        out = fn()
        return out, tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def _rows(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(N, D)) + rng.normal(size=D)


def test_unused_cosine_holds_a_block_not_the_rows_twice():
    rows = _rows()
    ref = unused_mean(_rows(1)[:64], principal_directions(_rows(2)[:512], 1)[:, 0])
    values, peak = _peak(lambda: unused_cosine(rows, ref))
    # The output (n float64) and a block's two temporaries; all rows at once held 2 n d.
    assert peak < values.nbytes + 4 * COSINE_BLOCK * D * 8
    assert peak < rows.nbytes / 2
    whole = cosines(without_component(rows, ref.first_pc), ref.mean)
    np.testing.assert_array_equal(values, whole)  # the blocks change no bit


def test_draw_kind_holds_one_centered_copy_at_a_time():
    rows = _rows()
    directions = principal_directions(_rows(3)[:512], 16)
    _, peak = _peak(lambda: draw_kind(rows, directions, np.zeros(D), 1.0, 1.0))
    # One centered (n, d) copy at a time (the spread's was kept while the mean test made
    # its own: 2 n d).
    assert peak < 1.5 * rows.nbytes
