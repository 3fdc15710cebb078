"""Each checkpoint is opened once and each of its rows read once (issue 30): the original
rows by one walk that feeds every consumer, the new rows by the analysis, whose rows the
report's figures, the movement since the init and the drift reuse.

References: the bytes of the file itself (the digest of what was read, recomputed with
xxhash from the file), and the route that reads everything again (``measure_drift``
from paths, ``read_rows`` of the sample)."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
import xxhash
from geodiag_fixtures import BASE_VOCAB, DIM, base_rows, planted_new_rows
from read_counter import EMB, count_reads, rows_read

from geodiag.analysis import rows as analysis_rows
from geodiag.analysis.checkpoint import measure_checkpoint
from geodiag.analysis.drift import drift_checkpoints, measure_drift
from geodiag.analysis.options import AnalyzeOptions
from geodiag.analysis.vocabulary import SampleRows, feed
from geodiag.io.checkpoint import open_checkpoint
from geodiag.jsonio import dumps

N_NEW = 24  # the fixtures' new tokens (3 levels x 8)


@pytest.fixture
def reads(monkeypatch):
    return count_reads(monkeypatch)


def test_analysis_reads_every_row_once(make_ckpt, reads):
    measure_checkpoint(make_ckpt("random"))
    got = rows_read(reads, "random", EMB)
    assert set(got) == set(range(BASE_VOCAB + N_NEW))  # originals, sample and new rows
    assert set(got.values()) == {1}


def test_untied_head_reads_every_row_of_both_matrices_once(make_ckpt, reads):
    head = np.random.default_rng(5).normal(size=(BASE_VOCAB + N_NEW, DIM))
    measure_checkpoint(make_ckpt("random", untied_head=head))
    for tensor in (EMB, "lm_head.weight"):
        got = rows_read(reads, "random", tensor)
        assert set(got) == set(range(BASE_VOCAB + N_NEW)) and set(got.values()) == {1}, tensor


def test_the_digest_hashes_the_new_rows_then_the_vocabulary_once(make_ckpt):
    """xxh3-128 over the header and every byte range read, in read order (safetensors.py),
    reported as "xxh3_128:<hex>": recomputed from the file by xxhash itself, the new rows
    first, then rows 0..base once."""
    root = make_ckpt("random")
    report = measure_checkpoint(root)
    raw = (root / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    begin, _ = header[EMB]["data_offsets"]
    row = DIM * 4  # F32
    data = raw[8 + n + begin :]
    want = xxhash.xxh3_128(raw[8 : 8 + n])
    want.update(data[BASE_VOCAB * row : (BASE_VOCAB + N_NEW) * row])
    want.update(data[: BASE_VOCAB * row])
    assert report.digests[str(root / "model.safetensors")] == "xxh3_128:" + want.hexdigest()


@pytest.mark.parametrize("float32", [False, True])
def test_drift_from_held_rows_equals_drift_from_the_paths(make_ckpt, monkeypatch, float32):
    if float32:  # every matrix "at scale": rows held as float32, drift streamed
        monkeypatch.setattr(analysis_rows, "FLOAT64_ROWS_MAX_ELEMENTS", 0)
    base = base_rows()
    a = make_ckpt("grounded", name="a")
    moved = planted_new_rows("grounded", base) + np.random.default_rng(1).normal(size=(N_NEW, DIM))
    b = make_ckpt(moved * 0.05, name="b")
    opts = AnalyzeOptions(n_permutations=20)
    ca, cb = open_checkpoint(a), open_checkpoint(b)
    held: tuple[list, list] = ([], [])
    measure_checkpoint(ca, opts, keep_rows=True, each=held[0].append)
    measure_checkpoint(cb, opts, keep_rows=True, each=held[1].append)
    assert (held[0][0].rows.dtype == np.float32) is float32
    got = drift_checkpoints(ca, cb, a, b, opts, held)
    assert dumps(got) == dumps(measure_drift(a, b, opts=opts))


def test_movement_from_held_reference_rows_equals_reading_them(make_ckpt):
    init = make_ckpt("random", name="init")
    sft = make_ckpt(planted_new_rows("random", base_rows()) * 1.01, name="sft")
    opts = AnalyzeOptions(n_permutations=20)
    ref = open_checkpoint(init)
    ref_held: list = []
    measure_checkpoint(ref, opts, keep_rows=True, each=ref_held.append)
    ckpt = open_checkpoint(sft)
    ckpt.reference = ref
    got = measure_checkpoint(ckpt, opts, reference=ref_held)
    fresh = open_checkpoint(sft)
    fresh.reference = open_checkpoint(init)
    want = measure_checkpoint(fresh, opts)
    assert got.matrices[0].untrained.movement is not None
    assert dumps(got.matrices) == dumps(want.matrices)


def test_sample_rows_picked_from_blocks_equal_the_rows():
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(1000, 7)).astype(np.float32)
    ids = np.sort(rng.choice(1000, size=123, replace=False))
    for float32 in (False, True):
        sample = SampleRows(ids, float32)
        feed(
            ((np.arange(s, min(s + 64, 1000)), rows[s : s + 64]) for s in range(0, 1000, 64)),
            [sample],
        )
        assert sample.complete
        assert sample.rows.dtype == (np.float32 if float32 else np.float64)
        np.testing.assert_array_equal(sample.rows, rows[ids])


def test_sample_rows_from_float64_blocks_are_left_to_the_caller():
    """A float64 block may be computed (a merged LoRA delta): not taken, read instead."""
    sample = SampleRows(np.array([1, 2]), float32=False)
    sample.add(np.arange(4), np.ones((4, 3)))
    assert not sample.complete and sample.rows is None


def test_feed_hands_every_block_to_every_consumer_in_order():
    class Log:
        def __init__(self):
            self.seen = []

        def add(self, ids, rows):
            self.seen.append(int(ids[0]))

    logs = [Log(), Log()]
    blocks = [(np.arange(s, s + 2), np.zeros((2, 1))) for s in (0, 2, 4)]
    assert feed(iter(blocks), logs) == 3
    assert [g.seen for g in logs] == [[0, 2, 4], [0, 2, 4]]


def test_no_padding_rows_found_without_decoding_the_vocabulary(make_ckpt, monkeypatch):
    """An added token on the last row: len(tokenizer) >= rows, so no padding rows; the
    vocabulary is not decoded to learn it (SmolLM2's costs ~25 ms). Reference: the
    length itself, decoded."""
    from geodiag.io.vocabulary.tokenizer import TokenizerInfo

    ckpt = open_checkpoint(make_ckpt("random"))
    assert max(t.id for t in ckpt.tokenizer.added) == ckpt.matrices[0].n_rows - 1
    monkeypatch.setattr(TokenizerInfo, "__len__", lambda self: pytest.fail("decoded"))
    assert len(ckpt.padding_ids()) == 0
    monkeypatch.undo()
    assert len(ckpt.tokenizer) >= ckpt.matrices[0].n_rows
