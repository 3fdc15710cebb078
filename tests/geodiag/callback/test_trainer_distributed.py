"""GeodiagCallback under real torch.distributed data parallelism on CPU (gloo, 2 processes).

DDP (``DistributedDataParallel``) and FSDP2 (``fully_shard``: the embedding and the head
are DTensors sharded by rows, 60 of 120 per rank), each trained by the explicit loop of
trainer_distributed_run.py, which calls the callback's hooks as transformers.Trainer does.
The callback's numbers at every step (the snapshot figures, the row-by-row findings, the
gradient norm) equal those of a single process that trains on the same global batches
from the same seed, and the untrained alarm names the same tokens.
"""

from __future__ import annotations

import json
import socket

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
import torch.distributed as dist  # noqa: E402
import trainer_distributed_run as run  # noqa: E402

from geodiag.gate.trajectory import read_records  # noqa: E402

pytestmark = [
    pytest.mark.numerics,
    pytest.mark.skipif(not dist.is_available(), reason="torch built without distributed"),
]

# Tolerance. The parameters are float32 (unit roundoff u = 2^-24 ~ 6e-8). Data parallelism
# changes only the order of summation: each rank sums the loss gradient over its half of
# the tokens and the halves are averaged (DDP all-reduce, FSDP2 reduce-scatter), where one
# process sums all the tokens at once. A gradient entry then differs by a few u relative
# to the sum of its terms' magnitudes, and so does the SGD update (lr x gradient); after
# STEPS = 4 steps a weight differs by ~STEPS x a few u of |weight|. The figures are
# computed in float64 from those rows and inherit a relative error of (error of the rows)
# / (size of what they measure). The smallest such size is the new rows' displacement
# from their start, ~1e-2 against |w| ~ 0.1 for the rows that move: 10 x (4 x a few u) ~
# 1e-5 at worst. Measured: at most 1.2e-7 (~2 u; the test prints it). A wrong gather, or a
# rank measuring other rows, moves a figure by orders more. Counts (unmoved rows,
# identical rows, untrained tokens), p-values (counts of permutations) and the stop
# decision must be equal.
RTOL, ATOL = 1e-5, 1e-9
COUNTS = ("n_untrained", "n_unmoved", "identical_rows")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """The reference: one process, the whole batch of each step."""
    out = tmp_path_factory.mktemp("single")
    threads = torch.get_num_threads()
    try:
        result = run.train(out, on_untrained="stop")
    finally:
        torch.set_num_threads(threads)
    records, _ = read_records(out / "geodiag_trajectory.jsonl")
    return result, records


def _spawn(tmp_path, mode: str, on_untrained: str):
    torch.multiprocessing.spawn(
        run.worker,
        args=(2, mode, str(tmp_path), _port(), on_untrained),
        nprocs=2,
        join=True,
    )
    results = [json.loads((tmp_path / f"result{r}.json").read_text()) for r in range(2)]
    records, _ = read_records(tmp_path / "rank0" / "geodiag_trajectory.jsonl")
    return results, records


def _figures(structure: dict, prefix: str = "") -> dict[str, float | None]:
    """Every number of a record's structure, flattened (rsa.a, unmoved_by_level.b, ...)."""
    out = {}
    for k, v in structure.items():
        if isinstance(v, dict):
            out.update(_figures(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def _agree(records, reference) -> float:
    """Asserts step-by-step agreement; returns the largest relative difference seen."""
    assert [r["step"] for r in records] == [r["step"] for r in reference] == [0, 1, 2, 3, 4]
    worst = 0.0
    for mine, ref in zip(records, reference, strict=True):
        assert mine["collapsed"] == ref["collapsed"]
        for key in ("structure", "structure_output"):
            got, want = _figures(mine[key]), _figures(ref[key])
            assert got.keys() == want.keys()
            for name, w in want.items():
                g = got[name]
                if w is None or name in COUNTS or name.startswith("rsa_p"):
                    assert g == w, (mine["step"], key, name)
                    continue
                assert g == pytest.approx(w, rel=RTOL, abs=ATOL), (mine["step"], key, name)
                worst = max(worst, abs(g - w) / max(abs(w), 1e-300))
    return worst


def _check_findings(records) -> None:
    """What the run must show whatever the parallelism: level b never moves."""
    last = records[-1]["structure"]
    assert last["unmoved_by_level"] == {"a": 0.0, "b": 1.0}
    assert last["n_unmoved"] == 10 and last["n_untrained"] == 10
    assert all(r["structure"]["grad_norm"] > 0 for r in records[1:])
    assert all(r["structure_output"]["grad_norm"] > 0 for r in records[1:])


def test_ddp_matches_a_single_process(tmp_path, single):
    ref_result, reference = single
    # "stop": every rank measures and decides (same weights, same decision).
    results, records = _spawn(tmp_path, "ddp", "stop")
    worst = _agree(records, reference)
    print(f"DDP: largest relative difference of a figure {worst:.2e}")
    _check_findings(records)
    assert [r["stop"] for r in results] == [True, True] and ref_result["stop"]
    assert [r["local_rows"] for r in results] == [120, 120]  # DDP: every rank holds all
    assert not (tmp_path / "rank1").exists()  # only the main process writes
    for r in results:
        np.testing.assert_allclose(r["rows"], ref_result["rows"], rtol=RTOL, atol=1e-7)


def test_fsdp2_sharded_embedding_matches_a_single_process(tmp_path, single):
    ref_result, reference = single
    # "warn": rank 1 only joins the unshard and the gradient gather (collectives) and
    # measures nothing.
    results, records = _spawn(tmp_path, "fsdp2", "warn")
    worst = _agree(records, reference)
    print(f"FSDP2: largest relative difference of a figure {worst:.2e}")
    _check_findings(records)
    assert [r["stop"] for r in results] == [False, False]
    assert [r["local_rows"] for r in results] == [60, 60]  # 120 rows sharded over 2 ranks
    assert not (tmp_path / "rank1").exists()
    for r in results:
        np.testing.assert_allclose(r["rows"], ref_result["rows"], rtol=RTOL, atol=1e-7)
