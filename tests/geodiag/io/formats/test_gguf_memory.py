"""Issue 50 item 6: a GGUF's rows are read a block at a time, never the whole tensor:
tracemalloc's peak while walking every row (as the vocabulary pass does) and while reading
the new rows stays a fraction of the dequantized tensor. Bytes, never time."""

import tracemalloc

import numpy as np
import pytest
from geodiag_fixtures import BASE_VOCAB, write_gguf

pytest.importorskip("gguf")

from geodiag.io.formats.gguf import EMBEDDING, GGUFStore  # noqa: E402

N_ROWS, D, BLOCK = 16 * 1024, 64, 1024


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    rng = np.random.default_rng(0)
    emb = rng.normal(size=(N_ROWS, D)).astype(np.float32)
    tokens = [f"tok{i}" for i in range(N_ROWS)]
    path = tmp_path_factory.mktemp("g") / "big.gguf"
    write_gguf(path, emb, qtype="Q8_0", tokens=tokens, types=[1] * N_ROWS)
    return GGUFStore(path), emb


def _peak(fn) -> int:
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def test_walking_every_row_holds_a_block_not_the_tensor(store):
    s, emb = store
    whole = N_ROWS * D * 4  # the tensor dequantized as float32
    sums = np.zeros(D)

    def walk():
        for start in range(0, N_ROWS, BLOCK):
            sums[:] += s.read_block(EMBEDDING, start, start + BLOCK, float32=True).sum(0)

    peak = _peak(walk)
    assert peak < whole / 4, f"{peak} bytes held walking a {whole}-byte tensor"
    np.testing.assert_allclose(sums, emb.sum(0), atol=0.05 * np.sqrt(N_ROWS))  # it read them


def test_reading_the_new_rows_reads_only_them(store):
    s, _ = store
    ids = np.arange(N_ROWS - BASE_VOCAB, N_ROWS)
    peak = _peak(lambda: s.read_rows(EMBEDDING, ids))
    assert peak < 8 * len(ids) * D * 8  # a few copies of the rows asked for
    assert peak < N_ROWS * D * 4 / 4
