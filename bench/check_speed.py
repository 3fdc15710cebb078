"""The gate's time and the report's memory on a Qwen-sized vocabulary, against the naive
route, in one run; prints ratios (issue 23).

1. ``geodiag check`` on 150,000 original + 2,000 new rows x 1,024 float32 (Qwen-sized),
   per-token findings included: this tree against the code of ``--baseline`` (a git
   revision, extracted with ``git archive``), each in a fresh process, interleaved;
   medians of wall time, CPU time (user + sys of the child, by wait4) and peak RSS.
2. The spectra alone on 2,000 x 1,024: ``summarize`` of the new rows and the reference
   sample against numpy.linalg.svd on each of the four matrices (as before), CPU time;
   and the Gram route's precision against the exact SVD on five geometries.
3. ``geodiag report`` peak RSS and time at 500, 2,000 and 8,000 new tokens (and 100,000
   with --report-scale), 1,024 dims, this tree against the baseline.
4. With --report-pair, ``geodiag report INIT SFT`` on 100,000 new tokens in 3 SID levels
   (bench/_synthetic.py: sidecar, codebooks, an init -> SFT drift pair): the levels' RSA,
   the movement since INIT and the drift, this tree against the baseline.

CPU model and load are printed before and after: the machine may be shared. Both
trees' bytecode is written first (read_path.compile_bytecode), as an installed package has it.

Usage: .venv/bin/python bench/check_speed.py [--workdir runs/bench] [--repeats 5]
       [--baseline HEAD~1] [--report-sizes 500,2000,8000] [--report-scale] [--report-pair]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from read_path import compile_bytecode, write_synthetic  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
N_BASE, N_NEW, DIM = 150_000, 2_000, 1_024


def cpu_model() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    name = next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if "Model name" in ln), "")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{name or 'unknown CPU'}, {os.cpu_count()} logical CPUs, load average {load}"


def measured(cmd: list[str], pythonpath: Path, env: dict | None = None) -> dict:
    """Wall, CPU (user + sys) and peak RSS of ``cmd``, run by a tiny wrapper process whose
    only child it is: the wrapper's RUSAGE_CHILDREN is that child's, once waited for."""
    wrapper = (
        "import resource,subprocess,sys,time,json;t=time.perf_counter();"
        "p=subprocess.Popen(sys.argv[1:],stdout=subprocess.PIPE,stderr=subprocess.PIPE);"
        "out,err=p.communicate();ru=resource.getrusage(resource.RUSAGE_CHILDREN);"
        "print(json.dumps({'wall':time.perf_counter()-t,'cpu':ru.ru_utime+ru.ru_stime,"
        "'rss_mib':ru.ru_maxrss/1024,'rc':p.returncode,'err':err.decode()[-2000:]}))"
    )
    env = {**os.environ, **(env or {}), "PYTHONPATH": str(pythonpath)}
    # cwd: the tree itself, as ``python -m`` puts the working directory ahead of PYTHONPATH
    # (run from this repository, the baseline would measure this tree's code).
    res = subprocess.run(
        [sys.executable, "-c", wrapper, *cmd],
        capture_output=True,
        text=True,
        env=env,
        cwd=pythonpath,
    )
    data = json.loads(res.stdout)
    if data["rc"] not in (0, 1):
        raise SystemExit(f"failed ({data['rc']}): {' '.join(cmd)}\n{data['err']}")
    return data


def baseline_tree(rev: str, workdir: Path) -> Path:
    """The package at ``rev``, extracted once: the code this change is measured against."""
    out = workdir / f"baseline-{rev.replace('/', '_').replace('~', '-')}"
    if not (out / "geodiag").is_dir():
        out.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", rev, "geodiag"], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return out


def medians(runs: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in runs) for k in ("wall", "cpu", "rss_mib")}


# The floor of ``geodiag check``: a process that reads the bytes once (the new rows, then
# the original rows a block of 1,024 at a time, as the analysis's single walk does, keeping
# a seeded sample of 2,000) and takes the two 2,000-row spectra (new rows, sample) by one
# float64 Gram product and eigvalsh each. No digest, no findings, no JSON: what any tool
# measuring those spectra must at least pay. Run with one BLAS thread, as geodiag runs.
FLOOR = r"""
import json, sys
import numpy as np
path, n_base, n_new = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(path, "rb") as f:
    n = int.from_bytes(f.read(8), "little")
    info = json.loads(f.read(n))["model.embed_tokens.weight"]
    start, d = 8 + n + info["data_offsets"][0], info["shape"][1]
    f.seek(start + n_base * 4 * d)
    new = np.frombuffer(f.read(n_new * 4 * d), np.float32).reshape(n_new, d)
    ids = np.sort(np.random.default_rng(0).choice(n_base, size=n_new, replace=False))
    ref = np.empty((n_new, d), np.float32)
    f.seek(start)
    for s in range(0, n_base, 1024):
        block = np.frombuffer(f.read(min(1024, n_base - s) * 4 * d), np.float32).reshape(-1, d)
        lo, hi = np.searchsorted(ids, [s, s + len(block)])
        ref[lo:hi] = block[ids[lo:hi] - s]
for x in (new, ref):
    x = x.astype(np.float64)
    gram = x.T @ x if len(x) >= x.shape[1] else x @ x.T
    print(np.sqrt(np.clip(np.linalg.eigvalsh(gram), 0, None))[-1])
"""
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def bench_check(workdir: Path, baseline: Path, repeats: int) -> dict:
    root = workdir / "qwen-2000"
    if not (root / "config.json").is_file():
        write_synthetic(root, N_BASE, N_NEW, DIM, 0.0)
    small = workdir / "qwen-2000-vocab-50000"  # the same new rows count, a third of the vocabulary
    if not (small / "config.json").is_file():
        write_synthetic(small, N_BASE // 3, N_NEW, DIM, 0.0)

    def check(folder: Path, n_base: int) -> list[str]:
        cmd = [sys.executable, "-m", "geodiag.cli", "check", str(folder)]
        return cmd + ["--new-tokens", f"{n_base}:{n_base + N_NEW}"]

    floor = [sys.executable, "-c", FLOOR, str(root / "model-00001.safetensors")]
    floor += [str(N_BASE), str(N_NEW)]
    runs: dict[str, list[dict]] = {"this": [], "baseline": [], "floor": [], "small": []}
    for _ in range(repeats):  # interleaved: load drifts hit all alike
        runs["this"].append(measured(check(root, N_BASE), ROOT))
        runs["baseline"].append(measured(check(root, N_BASE), baseline))
        runs["floor"].append(measured(floor, ROOT, ONE_THREAD))
        runs["small"].append(measured(check(small, N_BASE // 3), ROOT))
    this, base, low = medians(runs["this"]), medians(runs["baseline"]), medians(runs["floor"])
    return {
        "this": this,
        "baseline": base,
        "floor": low,
        "vocab_50000": medians(runs["small"]),
        "wall_ratio": base["wall"] / this["wall"],
        "cpu_ratio": base["cpu"] / this["cpu"],
        "over_floor": this["wall"] / low["wall"],
        "rss_growth": this["rss_mib"] / medians(runs["small"])["rss_mib"],
    }


def bench_spectra(repeats: int) -> dict:
    from threadpoolctl import threadpool_limits

    from geodiag.metrics.geometry import summarize

    rng = np.random.default_rng(0)
    new = rng.standard_normal((N_NEW, DIM)) * 0.05
    ref = rng.standard_normal((N_NEW, DIM)) * 0.05 + 0.01

    def naive():
        for x in (new, ref):
            np.linalg.svd(x, compute_uv=False)
            np.linalg.svd(x - x.mean(axis=0), compute_uv=False)

    def ours():
        summarize(new, ref)
        summarize(ref)

    out = {}
    with threadpool_limits(1, user_api="blas"):  # as measure_checkpoint() runs them
        for name, f in (("summarize", ours), ("numpy_svd", naive)):
            times = []
            for _ in range(repeats):
                t = time.process_time()
                f()
                times.append(time.process_time() - t)
            out[name] = min(times)
    out["ratio"] = out["numpy_svd"] / out["summarize"]
    return out


def geometries(n: int = N_NEW, d: int = DIM, seed: int = 0) -> dict[str, np.ndarray]:
    """New-row geometries whose spectra span the conditioning the gate meets."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((5000, d)) * np.linspace(0.2, 0.02, d) + rng.normal(size=d) * 0.02
    mean = base.mean(axis=0)
    return {
        "random": rng.standard_normal((n, d)) * 0.05,
        "mean + 1e-9 noise": rng.multivariate_normal(
            mean, 1e-9 * np.cov(base, rowvar=False), size=n
        ),
        "a line": np.outer(rng.normal(size=n), rng.normal(size=d)) * 0.1,
        "low rank + mean": mean
        + rng.normal(size=(n, 3)) @ rng.normal(size=(3, d)) * 0.02
        + rng.normal(size=(n, d)) * 1e-3,
        "the mean": np.tile(mean, (n, 1)),
    }


def bench_precision() -> dict[str, float]:
    """Largest relative change of any rank figure, Gram route against the exact SVD."""
    from geodiag.metrics import geometry

    figures = ("effective_rank", "stable_rank", "participation_ratio", "top1_energy_share")
    out = {}
    for name, x in geometries().items():
        gram = geometry.summarize(x)
        limit = geometry._SVD_MAX_ELEMENTS
        geometry._SVD_MAX_ELEMENTS = x.size  # the exact SVD for this one matrix
        try:
            exact = geometry.summarize(x)
        finally:
            geometry._SVD_MAX_ELEMENTS = limit
        worst = 0.0
        for a, b in ((gram.uncentered, exact.uncentered), (gram.centered, exact.centered)):
            for f in figures:
                u, v = getattr(a, f), getattr(b, f)
                if v:
                    worst = max(worst, abs(u - v) / abs(v))
        out[name] = worst
    return out


def bench_report(workdir: Path, baseline: Path, sizes: list[int]) -> list[dict]:
    out = []
    for n in sizes:
        base = 32_000 if n > 10_000 else N_BASE  # the 100,000-row case: a smaller vocabulary
        root = workdir / f"report-{n}"
        if not (root / "config.json").is_file():
            write_synthetic(root, base, n, DIM, 0.0)
        row = {"n_new": n, "n_base": base}
        for name, tree in (("this", ROOT), ("baseline", baseline)):
            cmd = [sys.executable, "-m", "geodiag.cli", "report", str(root)]
            cmd += ["--new-tokens", f"{base}:{base + n}", "--permutations", "100"]
            cmd += ["-o", str(workdir / f"out-{name}-{n}" / "report.html")]
            row[name] = measured(cmd, tree)
        out.append(row)
    return out


def bench_report_pair(workdir: Path, baseline: Path) -> dict:
    from _synthetic import Spec
    from _synthetic import write_synthetic as write_sid_checkpoint

    n_base, levels = 32_000, (("a", 33_334), ("b", 33_333), ("c", 33_333))
    spec = Spec(levels=levels, dim=DIM, base_vocab=n_base)
    root = workdir / "report-pair-100000"
    for stage in ("init", "sft"):
        if not (root / stage / "config.json").is_file():
            write_sid_checkpoint(root / stage, "gti", stage, spec)
    row = {"n_new": spec.n_new, "n_base": n_base}
    for name, tree in (("this", ROOT), ("baseline", baseline)):
        cmd = [sys.executable, "-m", "geodiag.cli", "report", str(root / "init")]
        cmd += [str(root / "sft"), "--permutations", "100"]
        cmd += ["-o", str(workdir / f"out-pair-{name}" / "report.html")]
        row[name] = measured(cmd, tree)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--repeats", type=int, default=5, help="runs per route (medians)")
    ap.add_argument("--baseline", default="HEAD~1", help="git revision to compare with")
    ap.add_argument("--report-sizes", default="500,2000,8000")
    ap.add_argument("--report-scale", action="store_true", help="add the 100,000-row report")
    ap.add_argument(
        "--report-pair", action="store_true", help="add the 100,000-token init -> SFT pair"
    )
    ap.add_argument("--skip-check", action="store_true")
    args = ap.parse_args()
    workdir = (args.workdir or Path(tempfile.mkdtemp(prefix="geodiag-bench-"))).resolve()
    baseline = baseline_tree(args.baseline, workdir)
    for tree in (ROOT, baseline):
        compile_bytecode(tree)
    results = {"machine_before": cpu_model(), "baseline": args.baseline}
    print(results["machine_before"])
    if not args.skip_check:
        results["check"] = r = bench_check(workdir, baseline, args.repeats)
        t, b = r["this"], r["baseline"]
        print(
            f"check {N_BASE + N_NEW:,} x {DIM} with {N_NEW:,} new rows, medians of "
            f"{args.repeats}: {t['wall']:.2f} s wall / {t['cpu']:.2f} s CPU / "
            f"{t['rss_mib']:.0f} MiB; {args.baseline}: {b['wall']:.2f} s / {b['cpu']:.2f} s / "
            f"{b['rss_mib']:.0f} MiB; speedup {r['wall_ratio']:.2f}x wall, "
            f"{r['cpu_ratio']:.2f}x CPU (target <= 2 s)"
        )
        f, sm = r["floor"], r["vocab_50000"]
        print(
            f"floor (the bytes read once, two {N_NEW:,}-row spectra): {f['wall']:.2f} s wall / "
            f"{f['cpu']:.2f} s CPU / {f['rss_mib']:.0f} MiB; check at {r['over_floor']:.2f}x "
            f"the floor (target <= 1.5x); peak RSS at 50,000 original rows {sm['rss_mib']:.0f} "
            f"MiB, at {N_BASE:,} {t['rss_mib']:.0f} MiB (x{r['rss_growth']:.2f})"
        )
        results["spectra"] = r = bench_spectra(args.repeats)
        print(
            f"spectra of new rows + reference ({N_NEW} x {DIM}): summarize {r['summarize']:.2f} s "
            f"CPU, numpy.linalg.svd x4 {r['numpy_svd']:.2f} s ({r['ratio']:.2f}x)"
        )
        results["precision"] = r = bench_precision()
        print(
            f"Gram route against the exact SVD ({N_NEW} x {DIM}), largest relative change of "
            "a rank figure: " + "; ".join(f"{k} {v:.1e}" for k, v in r.items())
        )
    sizes = [int(s) for s in args.report_sizes.split(",") if s]
    if args.report_scale:
        sizes.append(100_000)
    results["report"] = rows = bench_report(workdir, baseline, sizes)
    for r in rows:
        t, b = r["this"], r["baseline"]
        print(
            f"report {r['n_new']:,} new x {DIM} (vocabulary {r['n_base']:,}): "
            f"{t['rss_mib']:.0f} MiB / {t['wall']:.1f} s wall / {t['cpu']:.1f} s CPU; "
            f"{args.baseline}: {b['rss_mib']:.0f} MiB / {b['wall']:.1f} s / {b['cpu']:.1f} s "
            f"(RSS ratio {b['rss_mib'] / t['rss_mib']:.2f})"
        )
    if args.report_pair:
        results["report_pair"] = r = bench_report_pair(workdir, baseline)
        t, b = r["this"], r["baseline"]
        print(
            f"report INIT SFT, {r['n_new']:,} new x {DIM} in 3 levels: {t['rss_mib']:.0f} MiB / "
            f"{t['wall']:.1f} s wall; {args.baseline}: {b['rss_mib']:.0f} MiB / "
            f"{b['wall']:.1f} s (RSS ratio {b['rss_mib'] / t['rss_mib']:.2f})"
        )
    results["machine_after"] = cpu_model()
    print(results["machine_after"])
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
