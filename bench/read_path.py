"""geodiag's read-and-measure path against the naive route, in one run; prints ratios.

1. SmolLM2-135M with 192 mean-resized tokens: ``geodiag metrics --json`` (with the
   nearest-neighbour scan over all 49k original rows) versus
   ``AutoModelForCausalLM.from_pretrained`` + slicing the embedding + the same metrics.
   Wall time and peak RSS of each, each in a fresh process; medians of --repeats runs,
   interleaved; CPU and load printed before and after (the machine may be shared);
   geodiag's bytecode (and --baseline-tree's) written first (compile_bytecode).
2. Peak memory must not grow with the rest of the checkpoint: the same embedding in a
   sharded checkpoint with >= 2 GB of other tensors, against the embedding alone.
3. Scale: 100,000 new tokens x 1,024 dims (time and peak RSS; targets 60 s, 4 GB).

Usage: .venv/bin/python bench/read_path.py [--workdir runs/bench] [--repeats 5]
       [--skip-model] [--skip-scale]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from geodiag.io.formats.safetensors import save_file

N_ADDED = 192  # the case: SmolLM2-135M + 192 mean-resized tokens


def run_child(cmd: list[str], tree: Path | None = None) -> tuple[float, float, str]:
    """Peak RSS of exactly one child: fork a tiny wrapper that waits on it with wait4.
    ``tree``: run the geodiag of that checkout (PYTHONPATH and working directory)."""
    wrapper = (
        "import os,subprocess,sys,time,json;t=time.perf_counter();"
        "p=subprocess.Popen(sys.argv[1:],stdout=subprocess.PIPE,stderr=subprocess.PIPE);"
        "out=p.stdout.read();err=p.stderr.read();_,st,ru=os.wait4(p.pid,0);"
        "sys.stderr.write(err.decode()[-3000:]) if st else None;"
        "print(json.dumps({'wall':time.perf_counter()-t,'rss_mib':ru.ru_maxrss/1024,'status':st,"
        "'cpu':ru.ru_utime+ru.ru_stime,"
        "'out':out.decode()}))"
    )
    env = None if tree is None else {**os.environ, "PYTHONPATH": str(tree)}
    res = subprocess.run(
        [sys.executable, "-c", wrapper, *cmd], capture_output=True, text=True, env=env, cwd=tree
    )
    if res.returncode != 0 or not res.stdout.strip():
        raise SystemExit(f"wrapper failed: {res.stderr[-2000:]}")
    data = json.loads(res.stdout)
    if data["status"] != 0:
        raise SystemExit(f"command failed: {' '.join(cmd)}\n{res.stderr}")
    run_child.cpu = data["cpu"]  # user + sys of the child, for the CPU medians
    return data["wall"], data["rss_mib"], data["out"]


def timed(cmd: list[str], tree: Path | None = None) -> tuple[float, float, float]:
    """(wall s, peak RSS MiB, CPU s) of one run of ``cmd``."""
    wall, rss, _ = run_child(cmd, tree)
    return wall, rss, run_child.cpu


GEODIAG = [sys.executable, "-m", "geodiag.cli"]
HERE = Path(__file__).resolve().parent.parent  # the tree measured


def compile_bytecode(tree: Path) -> None:
    """Write the bytecode of ``tree``'s geodiag before any run is timed, as an installed
    package has it. Where PYTHONDONTWRITEBYTECODE is set (as on the development machines)
    every run would otherwise compile geodiag's ~150 modules anew: ~0.1-0.2 s of each
    start on AMD EPYC, 2 cores, charged to geodiag and not to the naive route, whose
    packages come with their bytecode."""
    cmd = [sys.executable, "-m", "compileall", "-q", str(tree / "geodiag")]
    subprocess.run(cmd, check=True, capture_output=True)


NAIVE = r"""
import sys, numpy as np, torch
from transformers import AutoModelForCausalLM
from geodiag.metrics.geometry import summarize
path, start, end = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
emb = model.get_input_embeddings().weight.detach()
rows = emb[start:end].double().numpy()
ref_ids = np.sort(np.random.default_rng(0).choice(start, size=end - start, replace=False))
print(summarize(rows, emb[ref_ids].double().numpy()).centered.effective_rank)
"""


def smollm2_with_added_tokens(workdir: Path) -> Path:
    """SmolLM2-135M (converted once by gti) with N_ADDED SID-like tokens, mean+noise init."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from gti.models.smollm2 import ensure_converted

    out = workdir / f"smollm2-plus{N_ADDED}"
    if (out / "model.safetensors").is_file():
        return out
    src = ensure_converted()  # honours $GTI_CACHE
    tok = AutoTokenizer.from_pretrained(src)
    model = AutoModelForCausalLM.from_pretrained(src, torch_dtype=torch.float32)
    tok.add_tokens([f"<{lv}_{c}>" for lv in "abc" for c in range(N_ADDED // 3)])
    torch.manual_seed(0)
    model.resize_token_embeddings(len(tok), mean_resizing=True)  # transformers' default init
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def bench_model(workdir: Path, repeats: int, baseline: Path | None = None) -> dict:
    """Medians of ``repeats`` runs of each route, interleaved so load drifts hit all alike."""
    ckpt = smollm2_with_added_tokens(workdir)
    cfg = json.loads((ckpt / "config.json").read_text())
    end = cfg["vocab_size"]
    start = end - N_ADDED
    runs: dict[str, list[tuple[float, float, float]]] = {
        "geodiag": [],
        "naive": [],
        "no_neighbors": [],
        "version": [],
        "baseline": [],
    }
    for _ in range(repeats):
        if baseline is not None:  # the same command, by the code before this change
            runs["baseline"].append(timed([*GEODIAG, "metrics", str(ckpt), "--json"], baseline))
        runs["geodiag"].append(timed([*GEODIAG, "metrics", str(ckpt), "--json"]))
        runs["naive"].append(timed([sys.executable, "-c", NAIVE, str(ckpt), str(start), str(end)]))
        # The naive route computes no nearest neighbours; geodiag without them, for the
        # like-for-like figure, and the bare start-up cost.
        runs["no_neighbors"].append(
            timed([*GEODIAG, "metrics", str(ckpt), "--json", "--neighbors", "0"])
        )
        runs["version"].append(timed([*GEODIAG, "--version"]))
    med = {
        k: tuple(statistics.median(run[j] for run in v) for j in range(3))  # wall, rss, cpu
        for k, v in runs.items()
        if v
    }
    return {
        "repeats": repeats,
        "geodiag_s": med["geodiag"][0],
        "geodiag_rss_mib": med["geodiag"][1],
        "naive_s": med["naive"][0],
        "naive_rss_mib": med["naive"][1],
        "speedup": med["naive"][0] / med["geodiag"][0],
        "geodiag_cpu_s": med["geodiag"][2],
        "naive_cpu_s": med["naive"][2],
        "cpu_speedup": med["naive"][2] / med["geodiag"][2],
        "baseline_cpu_s": med["baseline"][2] if "baseline" in med else None,
        "rss_ratio": med["naive"][1] / med["geodiag"][1],
        "no_neighbors_s": med["no_neighbors"][0],
        "version_s": med["version"][0],
        "speedup_no_neighbors": med["naive"][0] / med["no_neighbors"][0],
        "baseline_s": med["baseline"][0] if "baseline" in med else None,
        "baseline_rss_mib": med["baseline"][1] if "baseline" in med else None,
        "all_runs": runs,
    }


def machine() -> str:
    """CPU model and load, to print beside every timing (the machine may be shared)."""
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown CPU",
    )
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{cpu}, {os.cpu_count()} logical CPUs, load average {load}"


def write_synthetic(
    root: Path, n_base: int, n_new: int, dim: int, filler_gb: float, seed: int = 0
) -> Path:
    """Embedding (n_base + n_new, dim) in shard 1; filler_gb of other tensors in further shards."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    emb = np.empty((n_base + n_new, dim), np.float32)
    for s in range(0, len(emb), 16384):  # chunked: the generator itself should not dominate memory
        emb[s : s + 16384] = (
            rng.standard_normal((min(16384, len(emb) - s), dim), dtype=np.float32) * 0.05
        )
    weight_map = {"model.embed_tokens.weight": "model-00001.safetensors"}
    save_file({"model.embed_tokens.weight": emb}, root / "model-00001.safetensors")
    del emb
    n_fill = int(filler_gb * 2)  # shards of 0.5 GB
    for i in range(n_fill):
        name = f"model.layers.{i}.mlp.weight"
        shard = f"model-{i + 2:05d}.safetensors"
        save_file({name: np.zeros((2**27,), np.float32)}, root / shard)  # 0.5 GB each
        weight_map[name] = shard
    (root / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (root / "config.json").write_text(
        json.dumps({"hidden_size": dim, "vocab_size": n_base + n_new})
    )
    return root


def bench_sharded(workdir: Path) -> dict:
    small = write_synthetic(workdir / "emb-only", 49152, N_ADDED, 576, 0.0)
    big = write_synthetic(workdir / "emb-plus-2gb", 49152, N_ADDED, 576, 2.0)
    size_gb = sum(f.stat().st_size for f in big.iterdir()) / 1e9
    args = ["metrics", "--json", "--new-tokens", f"49152:{49152 + N_ADDED}"]
    _, rss_small, _ = run_child([*GEODIAG, args[0], str(small), *args[1:]])
    _, rss_big, _ = run_child([*GEODIAG, args[0], str(big), *args[1:]])
    return {
        "checkpoint_gb": size_gb,
        "rss_emb_only_mib": rss_small,
        "rss_with_2gb_mib": rss_big,
        "rss_growth": rss_big / rss_small,
    }


def bench_scale(workdir: Path) -> dict:
    n_base, n_new, dim = 32000, 100_000, 1024
    root = write_synthetic(workdir / "scale-100k", n_base, n_new, dim, 0.0)
    wall, rss, out = run_child(
        [*GEODIAG, "metrics", str(root), "--json", "--new-tokens", f"{n_base}:{n_base + n_new}"]
    )
    rep = json.loads(out)
    return {
        "n_new": n_new,
        "dim": dim,
        "seconds": wall,
        "rss_mib": rss,
        "notes": rep["notes"],
        "effective_rank": rep["matrices"][0]["new"]["centered"]["effective_rank"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--skip-model", action="store_true", help="skip the SmolLM2 comparison")
    ap.add_argument("--skip-scale", action="store_true", help="skip the 100,000-token run")
    ap.add_argument("--repeats", type=int, default=5, help="runs per route (medians)")
    ap.add_argument(
        "--baseline-tree", type=Path, help="also time metrics --json by this checkout's code"
    )
    ap.add_argument("--skip-sharded", action="store_true", help="skip the 2 GB sharded case")
    args = ap.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="geodiag-bench-"))
    for tree in (HERE, args.baseline_tree):
        if tree is not None:
            compile_bytecode(tree)
    results = {"machine_before": machine()}
    print(results["machine_before"])
    if not args.skip_model:
        results["smollm2"] = r = bench_model(workdir, args.repeats, args.baseline_tree)
        print(
            f"SmolLM2-135M + {N_ADDED} mean-resized tokens, medians of {r['repeats']}: "
            f"geodiag metrics --json {r['geodiag_s']:.2f} s / {r['geodiag_rss_mib']:.0f} MiB; "
            f"from_pretrained + slicing {r['naive_s']:.2f} s / {r['naive_rss_mib']:.0f} MiB; "
            f"speedup {r['speedup']:.1f}x (target >= 10x), RSS ratio {r['rss_ratio']:.1f}x; "
            f"CPU {r['geodiag_cpu_s']:.2f} s against {r['naive_cpu_s']:.2f} s "
            f"({r['cpu_speedup']:.1f}x); "
            f"without the neighbour scan {r['no_neighbors_s']:.2f} s; --version {r['version_s']:.2f} s"
        )
        if r["baseline_s"] is not None:
            print(
                f"  {args.baseline_tree}: metrics --json {r['baseline_s']:.2f} s / "
                f"{r['baseline_rss_mib']:.0f} MiB / {r['baseline_cpu_s']:.2f} s CPU, speedup "
                f"over the naive route {r['naive_s'] / r['baseline_s']:.1f}x wall, "
                f"{r['naive_cpu_s'] / r['baseline_cpu_s']:.1f}x CPU"
            )
    if args.skip_sharded:
        args.skip_scale = True
    if not args.skip_sharded:
        results["sharded"] = r = bench_sharded(workdir)
        print(
            f"sharded {r['checkpoint_gb']:.2f} GB: peak RSS {r['rss_with_2gb_mib']:.0f} MiB vs "
            f"{r['rss_emb_only_mib']:.0f} MiB for the embedding alone (x{r['rss_growth']:.2f})"
        )
    if args.skip_scale:
        results["machine_after"] = machine()
        print(results["machine_after"])
        print(json.dumps(results, indent=1))
        return
    results["scale"] = r = bench_scale(workdir)
    print(
        f"scale {r['n_new']} x {r['dim']}: {r['seconds']:.1f} s, peak {r['rss_mib']:.0f} MiB "
        f"(targets 60 s, 4096 MiB); sampled: {'; '.join(r['notes'])}"
    )
    results["machine_after"] = machine()
    print(results["machine_after"])
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
