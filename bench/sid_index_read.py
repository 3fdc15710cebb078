"""Reading a large SID index, streaming, against loading it whole (issue 40: "a
10-million-item index read streaming where the format allows: time and peak RSS against
json.load / pandas.read_parquet of the same file, memory flat in the item count").

Files (written once per size into --workdir, from a fixed seed): an LC-Rec-style
``{N}.index.json`` (``{"0": ["<a_12>", "<b_3>", "<c_44>"], ...}``, json.dump's spacing)
and an OpenOneRec-style ``{N}_codes.parquet`` (``pid`` string, ``codes`` list<int64>),
3 levels of 256 codes.

Arms, each in a fresh process (time from opening the file to the last item, imports
excluded; peak RSS is the child's ``ru_maxrss``, imports included):

1. ``stream``: ``geodiag.io.vocabulary.sids.stream_sid_map``, per-level code counts accumulated block
   by block, nothing kept (what codebook usage needs): memory flat in the item count;
2. ``read``: ``geodiag.io.vocabulary.sids.read_sid_map``, the typed result (item ids and an (N, 3)
   int64 array) held;
3. the baseline: ``json.load`` of the index / ``pandas.read_parquet`` of the table.

Usage: PYTHONPATH=. .venv/bin/python bench/sid_index_read.py [--items 1000000 3000000]
       [--workdir .cache/bench-sids] [--formats json parquet]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
LEVELS, CODES, SEED = 3, 256, 0
ARMS = {"json": ("stream", "read", "json.load"), "parquet": ("stream", "read", "pandas")}

CHILD = r"""
import json, resource, sys, time
arm, path = sys.argv[1:3]
import numpy as np
from geodiag.io.vocabulary.sids import read_sid_map, stream_sid_map
if arm == "pandas":
    import pandas
t0 = time.perf_counter()
if arm == "stream":
    counts = np.zeros((3, 257), np.int64)
    n = 0
    for ids, codes in stream_sid_map(path):
        n += len(ids)
        for lv in range(3):
            counts[lv] += np.bincount(codes[:, lv], minlength=257)[:257]
elif arm == "read":
    n = len(read_sid_map(path).items)
elif arm == "json.load":
    with open(path) as f:
        n = len(json.load(f))
else:
    n = len(pandas.read_parquet(path))
seconds = time.perf_counter() - t0
print(json.dumps({"n": n, "seconds": seconds,
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def write_index(path: Path, n_items: int) -> None:
    rng = np.random.default_rng(SEED)
    with open(path, "w") as f:
        f.write("{")
        for start in range(0, n_items, 100_000):
            codes = rng.integers(CODES, size=(min(100_000, n_items - start), LEVELS))
            f.write(
                ", ".join(
                    f'"{start + i}": ["<a_{a}>", "<b_{b}>", "<c_{c}>"]'
                    for i, (a, b, c) in enumerate(codes.tolist())
                )
            )
            if start + 100_000 < n_items:
                f.write(", ")
        f.write("}")


def write_parquet(path: Path, n_items: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(SEED)
    writer = None
    for start in range(0, n_items, 500_000):
        k = min(500_000, n_items - start)
        codes = rng.integers(CODES, size=(k, LEVELS)).astype(np.int64)
        table = pa.table(
            {
                "pid": pa.array([f"p{start + i}" for i in range(k)]),
                "codes": pa.FixedSizeListArray.from_arrays(codes.reshape(-1), LEVELS).cast(
                    pa.list_(pa.int64())
                ),
            }
        )
        writer = writer or pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
    writer.close()


def run_arm(arm: str, path: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, arm, str(path)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, nargs="+", default=[1_000_000, 3_000_000])
    ap.add_argument("--workdir", type=Path, default=ROOT / ".cache" / "bench-sids")
    ap.add_argument("--formats", nargs="+", default=["json", "parquet"], choices=list(ARMS))
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    print(f"CPU: {cpu}, {os.cpu_count()} cores; load {os.getloadavg()[0]:.1f}")
    print(f"{'format':8} {'items':>10} {'MiB':>7} {'arm':10} {'seconds':>8} {'peak RSS MiB':>13}")
    for fmt in args.formats:
        for n in args.items:
            path = args.workdir / (f"{n}.index.json" if fmt == "json" else f"{n}_codes.parquet")
            if not path.is_file():
                (write_index if fmt == "json" else write_parquet)(path, n)
            size = path.stat().st_size / 2**20
            for arm in ARMS[fmt]:
                r = run_arm(arm, path)
                assert r["n"] == n, r
                print(
                    f"{fmt:8} {n:>10} {size:>7.0f} {arm:10} {r['seconds']:>8.2f} "
                    f"{r['peak_mib']:>13.0f}",
                    flush=True,
                )
    print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
