"""What conversion and quantization do to the new rows of the demo's SFT arms.

For each arm: llama.cpp's converter writes F32 and Q8_0 GGUF files (``gti.deploy``);
gguf-py requantizes the F32 file to Q4_0, Q4_1, Q5_0 and Q5_1, and llama.cpp's
``llama-quantize`` (built once by ``gti.llama_cpp``) to Q4_K_M, Q5_K_M, Q6_K and Q2_K;
``geodiag drift CKPT FILE.gguf`` (``measure_drift``) compares the new rows, and the
per-token findings (``geodiag check``'s untrained rows) run on the checkpoint and on
each file. Prints the markdown table of README.md and writes table.json beside this
script.

    PYTHONPATH=. python reports/gguf/make_table.py runs/demo/seed-0/sft
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from geodiag.analysis.checkpoint import measure_checkpoint
from geodiag.analysis.drift import measure_drift, deployed_read
from geodiag.analysis.options import AnalyzeOptions
from geodiag.io.checkpoint import open_checkpoint
from geodiag.io.sources.options import ReadOptions
from geodiag.jsonio import dumps
from gti.deploy import QUANTIZER_TYPES, REQUANTIZED_TYPES, convert, requantize
from gti.llama_cpp import locate_quantizer, quantize

ARMS = ("mean", "random", "gti-from-description")


def _findings(path: Path, read: ReadOptions, opts: AnalyzeOptions) -> tuple[int, int]:
    """(untrained tokens, tokens with any finding) of the embedding: the gate's count."""
    report = measure_checkpoint(open_checkpoint(path, read), opts)
    u = report.matrices[0].untrained
    return u.n_untrained, u.n_flagged


def _row(arm: str, qtype: str, size: int, report, findings) -> dict:
    q, d = report.quantization, report.drift
    return {
        "arm": arm,
        "type": qtype,
        "embedding_type": q.dtype,
        "file_mb": round(size / 1e6, 1),
        "cosine_mean": d.cosine_mean,
        "cosine_min": d.cosine_min,
        "relative_error_mean": q.relative_error_mean,
        "relative_error_max": q.relative_error_max,
        "identical_pairs": q.identical_pairs,
        "neighbour_changed": q.neighbour_changed,
        "rsa": {n: (q.rsa_before[n].spearman, q.rsa_after[n].spearman) for n in q.rsa_before},
        "untrained": findings[0],  # (checkpoint, GGUF)
        "flagged": findings[1],
        "verdict": q.verdict,
    }


def _files(ckpt: Path, tmp: Path, quantizer: Path) -> dict[str, Path]:
    arm = ckpt.name
    f32 = convert(ckpt, tmp / f"{arm}-f32.gguf", "f32")
    files = {"F32": f32, "Q8_0": convert(ckpt, tmp / f"{arm}-q8_0.gguf", "q8_0")}
    for qtype in REQUANTIZED_TYPES:
        files[qtype.upper()] = requantize(f32, tmp / f"{arm}-{qtype}.gguf", qtype)
    for qtype in QUANTIZER_TYPES:
        files[qtype.upper()] = quantize(f32, tmp / f"{arm}-{qtype}.gguf", qtype, quantizer)
    return files


def main(runs: Path) -> None:
    rows = []
    opts = AnalyzeOptions(n_permutations=200, seed=0)
    quantizer = locate_quantizer()
    with tempfile.TemporaryDirectory(prefix="gguf-table-", dir=".cache") as tmp:
        for arm in ARMS:
            ckpt = runs / arm
            a = open_checkpoint(ckpt)
            before = _findings(ckpt, ReadOptions(), opts)
            files = _files(ckpt, Path(tmp), quantizer)
            for qtype, path in files.items():
                (report,) = measure_drift(ckpt, path, opts=opts)
                after = _findings(path, deployed_read(ReadOptions(), a, path), opts)
                found = tuple(zip(before, after, strict=True))
                rows.append(_row(arm, qtype, path.stat().st_size, report, found))
                print(rows[-1]["verdict"], file=sys.stderr)
            for path in files.values():
                path.unlink()
    Path(__file__).with_name("table.json").write_text(dumps(rows) + "\n")
    print(
        "| arm | type | new rows at | file MB | cosine mean (min) | rel. error mean (max) "
        "| pairs made identical | nearest neighbour changed | RSA a / b / c: SFT -> GGUF "
        "| untrained tokens: SFT -> GGUF |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        rsa = " / ".join(f"{_f(b)} -> {_f(a)}" for b, a in r["rsa"].values())
        print(
            f"| {r['arm']} | {r['type']} | {r['embedding_type']} | {r['file_mb']} "
            f"| {r['cosine_mean']:.5f} ({r['cosine_min']:.5f}) "
            f"| {r['relative_error_mean']:.4f} ({r['relative_error_max']:.4f}) "
            f"| {r['identical_pairs']} | {r['neighbour_changed']} of 768 | {rsa} "
            f"| {r['untrained'][0]} -> {r['untrained'][1]} |"
        )


def _f(x: float | None) -> str:
    return "undef." if x is None else f"{x:.3f}"


if __name__ == "__main__":
    main(Path(sys.argv[1]))
