"""Reading the new rows from a GGUF file against the safetensors path; prints the ratio.

1. Time: a fresh process opens the checkpoint (``open_checkpoint``) and reads its 768 new
   rows, from the gti checkpoint's ``model.safetensors`` and from the F32 and Q8_0 GGUF
   files llama.cpp's converter makes of it (``gti.deploy.convert``). Medians of
   --repeats runs, interleaved: the read itself (imports done), and the whole process
   (interpreter, imports: the gguf package costs ~0.25 s of its own).
2. Memory: peak RSS of the same read from the F32 GGUF with ~--filler-gb GB of other
   tensors appended (written with gguf-py's writer), against the file alone.

Usage: PYTHONPATH=. .venv/bin/python bench/gguf_read.py CKPT [--workdir .cache/bench-gguf]
       [--repeats 5] [--filler-gb 1.5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

CHILD = """
import json, sys, time
t0 = time.perf_counter()
from geodiag.io.checkpoint import open_checkpoint
from geodiag.io.sources.options import ReadOptions
if sys.argv[1].endswith(".gguf"):
    import geodiag.io.formats.gguf, gguf  # imports counted in the process time, not in the read
t1 = time.perf_counter()
ck = open_checkpoint(sys.argv[1], ReadOptions(sidecar=sys.argv[2]))
rows = ck.read_rows(ck.matrices[0], ck.new.ids)
t2 = time.perf_counter()
# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so a child of a large parent
# would report the parent's peak.
status = open("/proc/self/status").read().split("VmHWM:")[1]
rss = int(status.split()[0]) / 1024
print(json.dumps({"read_s": t2 - t1, "imports_s": t1 - t0, "rss_mb": rss, "n": len(rows),
                  "sum": float(rows.sum())}))
"""


def child(path: Path, sidecar: Path) -> dict:
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(sidecar)],
        capture_output=True,
        text=True,
        check=True,
    )
    res = json.loads(out.stdout)
    res["process_s"] = time.perf_counter() - start
    return res


def with_filler(src: Path, dst: Path, gigabytes: float) -> Path:
    """``src``'s metadata and tensors plus zero F32 tensors of ``gigabytes`` in all."""
    import gguf

    from gti.deploy import copy_metadata

    reader = gguf.GGUFReader(src)
    writer = gguf.GGUFWriter(dst, arch=reader.get_field("general.architecture").contents())
    copy_metadata(reader, writer)
    for t in reader.tensors:
        writer.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
    per = 256 * 2**20  # 256 MiB of float32 zeros per tensor (calloc: no pages touched)
    for i in range(int(gigabytes * 2**30 // per)):
        writer.add_tensor(f"filler.{i}.weight", np.zeros((per // 4 // 4096, 4096), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dst


def main() -> None:
    from gti.deploy import convert

    p = argparse.ArgumentParser()
    p.add_argument("checkpoint", type=Path)
    p.add_argument("--workdir", type=Path, default=Path(".cache/bench-gguf"))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--filler-gb", type=float, default=1.5)
    args = p.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    sidecar = args.checkpoint / "semantic_ids.json"
    files = {"safetensors": args.checkpoint / "model.safetensors"}
    for outtype in ("f32", "q8_0"):
        target = args.workdir / f"model-{outtype}.gguf"
        files[f"gguf {outtype.upper()}"] = (
            target if target.is_file() else convert(args.checkpoint, target, outtype)
        )
    big = args.workdir / "model-f32-filler.gguf"
    if not big.is_file():
        with_filler(files["gguf F32"], big, args.filler_gb)
    files["gguf F32 + filler"] = big
    cpu = next(
        (ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if "model name" in ln),
        platform.processor(),
    )
    print(f"CPU {cpu}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    runs: dict[str, list[dict]] = {k: [] for k in files}
    for _ in range(args.repeats):
        for name, path in files.items():
            runs[name].append(child(path, sidecar))
    base = statistics.median(r["read_s"] for r in runs["safetensors"])
    base_p = statistics.median(r["process_s"] for r in runs["safetensors"])
    for name, path in files.items():
        read = statistics.median(r["read_s"] for r in runs[name])
        proc = statistics.median(r["process_s"] for r in runs[name])
        rss = statistics.median(r["rss_mb"] for r in runs[name])
        print(
            f"{name:18s} {path.stat().st_size / 1e9:6.2f} GB  read {read * 1e3:7.1f} ms "
            f"(x{read / base:.2f})  process {proc:5.2f} s (x{proc / base_p:.2f})  "
            f"peak RSS {rss:6.1f} MB  rows {runs[name][0]['n']}"
        )
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
