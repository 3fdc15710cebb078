"""What conversion and quantization do to the new rows of the demo's SFT arms.

For each arm: llama.cpp's converter writes F32 and Q8_0 GGUF files (``gti.deploy``);
gguf-py requantizes the F32 file to Q4_0, Q4_1, Q5_0 and Q5_1; ``geodiag drift CKPT
FILE.gguf`` (``analyze_drift``) compares the new rows. Prints the markdown table of
README.md and writes table.json beside this script.

    PYTHONPATH=. python reports/gguf/make_table.py runs/demo/seed-0/sft
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from geodiag.analysis.drift import analyze_drift

from geodiag.analysis.options import AnalyzeOptions
from geodiag.jsonio import dumps
from gti.deploy import convert, requantize

ARMS = ("mean", "random", "gti-from-description")
REQUANTIZED = ("Q4_0", "Q4_1", "Q5_0", "Q5_1")  # what gguf.quants.quantize can write


def _row(arm: str, qtype: str, size: int, report) -> dict:
    q, d = report.quantization, report.drift
    return {
        "arm": arm,
        "type": qtype,
        "file_mb": round(size / 1e6, 1),
        "cosine_mean": d.cosine_mean,
        "cosine_min": d.cosine_min,
        "relative_error_mean": q.relative_error_mean,
        "relative_error_max": q.relative_error_max,
        "identical_pairs": q.identical_pairs,
        "neighbour_changed": q.neighbour_changed,
        "rsa": {n: (q.rsa_before[n].spearman, q.rsa_after[n].spearman) for n in q.rsa_before},
        "verdict": q.verdict,
    }


def main(runs: Path) -> None:
    rows = []
    opts = AnalyzeOptions(n_permutations=200, seed=0)
    with tempfile.TemporaryDirectory(prefix="gguf-table-", dir=".cache") as tmp:
        for arm in ARMS:
            ckpt = runs / arm
            f32 = convert(ckpt, Path(tmp) / f"{arm}-f32.gguf", "f32")
            files = {"F32": f32, "Q8_0": convert(ckpt, Path(tmp) / f"{arm}-q8_0.gguf", "q8_0")}
            for qtype in REQUANTIZED:
                files[qtype] = requantize(f32, Path(tmp) / f"{arm}-{qtype}.gguf", qtype)
            for qtype, path in files.items():
                (report,) = analyze_drift(ckpt, path, opts=opts)
                rows.append(_row(arm, qtype, path.stat().st_size, report))
                print(rows[-1]["verdict"], file=sys.stderr)
            for path in files.values():
                path.unlink()
    Path(__file__).with_name("table.json").write_text(dumps(rows) + "\n")
    print(
        "| arm | type | file MB | cosine mean (min) | rel. error mean (max) | pairs made identical | nearest neighbour changed | RSA a / b / c: SFT -> GGUF |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        rsa = " / ".join(f"{_f(b)} -> {_f(a)}" for b, a in r["rsa"].values())
        print(
            f"| {r['arm']} | {r['type']} | {r['file_mb']} | {r['cosine_mean']:.5f} ({r['cosine_min']:.5f}) "
            f"| {r['relative_error_mean']:.4f} ({r['relative_error_max']:.4f}) | {r['identical_pairs']} "
            f"| {r['neighbour_changed']} of 768 | {rsa} |"
        )


def _f(x: float | None) -> str:
    return "undef." if x is None else f"{x:.3f}"


if __name__ == "__main__":
    main(Path(sys.argv[1]))
