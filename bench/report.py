"""Size and time of `geodiag report` on 3 checkpoints x 1,000 new tokens, against naive alternatives.

    .venv/bin/python bench/report.py [--tokens 1000] [--dim 256] [--keep DIR]

Targets (issue 3): the HTML stays under 3 MB and is written in under 30 s on the dev
machine (2 cores). Three synthetic checkpoints (bench/_synthetic.py): gti/init and
gti/sft (one drift pair) and mean/sft; 4 SID levels, 5,000 original rows, default
analysis settings (1,000 RSA permutations, 5 nearest originals for 500 sampled tokens).

Measured in the same run:
1. ``geodiag report`` end to end, as a subprocess (start-up and imports included), with
   the default BLAS threading and again with ``OPENBLAS_NUM_THREADS=1`` (on a busy
   2-core machine, OpenBLAS threads that spin-wait make small SVDs ~100x slower);
2. in-process, the analysis once, then the page rendered twice from the same report:
   compact figures (ours: SVG line plots with text as text, 256-colour PNG heatmaps)
   and naive figures (matplotlib's default encodings: lossless RGBA PNG heatmaps,
   glyphs drawn as SVG paths);
3. a client-side-rendered report's data payload: the figure data (three n x n cosine
   maps, 4 digits, and the spectra) as JSON, which an interactive report (Plotly,
   Evidently) must inline before its JavaScript library. Only the payload is measured.
A vector-SVG heatmap of 1,000 tokens, measured once on this machine, is ~170 MB and
takes ~3 minutes to write: not run here.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._synthetic import Spec, write_synthetic  # noqa: E402
from geodiag.io.checkpoint import open_checkpoint  # noqa: E402
from geodiag.metrics.cosine import cosine_matrix  # noqa: E402
from geodiag.outputs.report import ReportOptions, build_report  # noqa: E402
from geodiag.outputs.report.figures import FigureFormat  # noqa: E402
from geodiag.outputs.report.html import render_html  # noqa: E402

TARGET_MB, TARGET_S = 3.0, 30.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--tokens", type=int, default=1000, help="new tokens per checkpoint (4 equal levels)"
    )
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--keep", type=Path, help="keep checkpoints and reports in this folder")
    args = ap.parse_args()

    per_level = args.tokens // 4
    spec = Spec(
        levels=tuple((name, per_level) for name in "abcd"),
        dim=args.dim,
        base_vocab=5000,
        code_dim=32,
    )
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        arms = (("gti", "init", None), ("gti", "sft", "../gti-init"), ("mean", "sft", None))
        ckpts = [write_synthetic(work / f"{s}-{st}", s, st, spec, init) for s, st, init in arms]
        print(
            f"3 checkpoints x {spec.n_new} new tokens, dim {spec.dim}, {spec.base_vocab} original rows"
        )

        def cli(env: dict[str, str]) -> tuple[float, float]:
            out = work / "cli.html"
            cmd = [sys.executable, "-m", "geodiag.cli", "report", *map(str, ckpts), "-o", str(out)]
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, **env})
            return out.stat().st_size / 1e6, time.perf_counter() - t0

        cli_mb, cli_s = cli({})
        one_mb, one_s = cli({"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"})

        t0 = time.perf_counter()
        report = build_report(ckpts, opts=ReportOptions())
        build_s = time.perf_counter() - t0
        import jinja2  # noqa: F401  (imports paid once, before either render is timed)
        import matplotlib.figure  # noqa: F401

        rendered = {}
        for name, style in (("compact", FigureFormat()), ("naive", FigureFormat(compact=False))):
            t0 = time.perf_counter()
            html = render_html(report, style)
            rendered[name] = (len(html.encode("utf-8")) / 1e6, time.perf_counter() - t0)

        t0 = time.perf_counter()
        spectra = [
            [
                m.new.uncentered.singular_values + m.new.centered.singular_values
                for m in e.report.matrices
            ]
            for e in report.checkpoints
        ]
        payload = {"cosine_maps": [], "spectra": spectra}
        for path in ckpts:
            ck = open_checkpoint(path)
            rows = ck.read_rows(ck.matrices[0], ck.new.ids)
            payload["cosine_maps"].append(cosine_matrix(rows).round(4).tolist())
        payload_mb = len(json.dumps(payload, separators=(",", ":"))) / 1e6
        payload_s = time.perf_counter() - t0

    size, render_s = rendered["compact"]
    naive_mb, naive_s = rendered["naive"]
    rows = [
        ("geodiag report (CLI subprocess, end to end)", cli_mb, cli_s),
        ("  same, OPENBLAS_NUM_THREADS=1", one_mb, one_s),
        ("in-process: analysis (build_report)", None, build_s),
        ("in-process: render, compact figures (ours)", size, render_s),
        ("in-process: render, naive figures", naive_mb, naive_s),
        ("client-side data payload only (JSON, no JS library)", payload_mb, payload_s),
    ]
    print(f"{'variant':<54} {'HTML MB':>8} {'seconds':>8} {'size vs ours':>13}")
    for name, mb, secs in rows:
        ratio = f"{mb / size:>12.1f}x" if mb else ""
        print(f"{name:<54} {'' if mb is None else f'{mb:.2f}':>8} {secs:>8.1f} {ratio:>13}")
    print(
        f"naive figures: {naive_mb / size:.1f}x the size, {naive_s / render_s:.1f}x the render time; "
        f"data payload alone: {payload_mb / size:.0f}x the size of our whole page"
    )
    ok = cli_mb < TARGET_MB and cli_s < TARGET_S
    print(f"targets < {TARGET_MB:g} MB and < {TARGET_S:g} s: {'met' if ok else 'MISSED'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
