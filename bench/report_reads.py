"""``geodiag report`` reading each checkpoint once, against the tree that read them again
(issue 30), in one run; prints the ratios.

Two cases, each run by this tree and by the baseline tree in fresh processes,
interleaved (``--repeats`` times; medians of wall time, CPU time and peak RSS, by
check_speed.measured):

1. the six checkpoints of ``make demo`` (SmolLM2-135M + 192 SID tokens; three init -> SFT
   drift pairs), given with ``--demo RUN`` (the run folder, e.g. runs/demo);
2. an init -> SFT pair of 100,000 new tokens x 1,024 in 3 SID levels over 32,000
   original rows (bench/_synthetic.py: sidecar, codebooks; RSA per level, the movement
   since the init, drift), written once into ``--workdir``.

The baseline reads the original rows twice per matrix (statistics, then the neighbour
scan), the sample again for the movement, the new rows again for the figures, and
reopens both checkpoints of each pair for the drift. Its tree: ``--baseline-tree DIR``
(a checkout) or ``--baseline REV`` (extracted with git archive).

Usage: .venv/bin/python bench/report_reads.py --demo runs/demo [--workdir runs/bench]
       [--repeats 3] [--baseline-tree /tmp/before | --baseline REV] [--skip-pair]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_speed import ROOT, baseline_tree, cpu_model, measured, medians  # noqa: E402

PAIR_BASE, PAIR_LEVELS, PAIR_DIM = 32_000, (("a", 33_334), ("b", 33_333), ("c", 33_333)), 1024


def pair_checkpoints(workdir: Path) -> list[Path]:
    from _synthetic import Spec
    from _synthetic import write_synthetic as write_sid_checkpoint

    spec = Spec(levels=PAIR_LEVELS, dim=PAIR_DIM, base_vocab=PAIR_BASE)
    root = workdir / "pair-100000"
    for stage in ("init", "sft"):
        if not (root / stage / "config.json").is_file():
            init = "../init" if stage == "sft" else None  # the pair a report measures
            write_sid_checkpoint(root / stage, "gti", stage, spec, init)
    return [root / "init", root / "sft"]


def compare(name: str, ckpts: list[Path], trees: dict[str, Path], workdir: Path, repeats: int):
    runs: dict[str, list[dict]] = {k: [] for k in trees}
    for _ in range(repeats):  # interleaved: load drifts hit both alike
        for label, tree in trees.items():
            cmd = [sys.executable, "-m", "geodiag.cli", "report", *map(str, ckpts)]
            cmd += ["-o", str(workdir / f"out-{name}-{label}" / "report.html")]
            runs[label].append(measured(cmd, tree))
    med = {k: medians(v) for k, v in runs.items()}
    t, b = med["this"], med["baseline"]
    print(
        f"report {name}, medians of {repeats}: {t['wall']:.1f} s wall / {t['cpu']:.1f} s CPU / "
        f"{t['rss_mib']:.0f} MiB; baseline {b['wall']:.1f} s / {b['cpu']:.1f} s / "
        f"{b['rss_mib']:.0f} MiB; {b['wall'] / t['wall']:.2f}x wall, {b['cpu'] / t['cpu']:.2f}x "
        f"CPU, RSS ratio {b['rss_mib'] / t['rss_mib']:.2f}",
        flush=True,
    )
    return {"this": t, "baseline": b, "runs": runs}


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--demo", type=Path, help="make demo's run folder (six checkpoints)")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--pair-repeats", type=int, default=1, help="runs of the 100,000 pair")
    ap.add_argument("--baseline-tree", type=Path, help="a checkout of the baseline")
    ap.add_argument("--baseline", default="7fa72c7", help="git revision, without a tree")
    ap.add_argument("--skip-pair", action="store_true")
    args = ap.parse_args()
    workdir = (args.workdir or Path(tempfile.mkdtemp(prefix="geodiag-bench-"))).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    base = args.baseline_tree or baseline_tree(args.baseline, workdir)
    trees = {"this": ROOT, "baseline": base.resolve()}
    results = {"machine_before": cpu_model(), "baseline": str(base)}
    print(results["machine_before"], f"; baseline {base}", flush=True)
    if args.demo:
        demo = sorted(p.parent for p in args.demo.resolve().glob("seed-*/*/*/model.safetensors"))
        results["demo"] = compare(
            f"demo ({len(demo)} checkpoints)", demo, trees, workdir, args.repeats
        )
    if not args.skip_pair:
        pair = pair_checkpoints(workdir)
        results["pair"] = compare("100,000-token pair", pair, trees, workdir, args.pair_repeats)
    results["machine_after"] = cpu_model()
    print(results["machine_after"])
    print(json.dumps({k: v for k, v in results.items()}, indent=1))


if __name__ == "__main__":
    main()
