"""Every output geodiag writes, on fixed inputs, into one folder: run it on two trees and
``diff -r`` the folders to check that a refactor kept the outputs byte-identical.

    PYTHONPATH=OLD_TREE python tools/output_snapshot.py FIXTURES OUT_BEFORE
    python tools/output_snapshot.py FIXTURES OUT_AFTER
    diff -r OUT_BEFORE OUT_AFTER

FIXTURES is created on the first run (the planted checkpoints of the test suite, and a
hostile-names one) and reused, so both runs read the same paths. ``--demo RUN`` adds the
six checkpoints of ``make demo``'s run folder (metrics, check, drift, report JSON).
The report's JSON carries the version and the command line, which are the same on both
trees; its HTML embeds figures whose PNG bytes depend on matplotlib, so only the JSON is
compared.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("mean", "mean-noise", "line", "random", "grounded")


def _fixtures(folder: Path) -> list[Path]:
    paths = [folder / k for k in KINDS] + [folder / "hostile"]
    if all(p.exists() for p in paths):
        return paths  # made by an earlier run, maybe of another tree
    sys.path.insert(0, str(ROOT / "tests" / "geodiag"))
    from geodiag_fixtures import (
        base_rows,
        planted_new_rows,
        write_checkpoint,
        write_hostile_tokenizer_checkpoint,
    )

    out = []
    for kind in KINDS:
        target = folder / kind
        if not target.exists():
            base = base_rows()
            write_checkpoint(target, planted_new_rows(kind, base), base=base)
        out.append(target)
    hostile = folder / "hostile"
    if not hostile.exists():
        write_hostile_tokenizer_checkpoint(hostile)
    out.append(hostile)
    return out


def _run(out: Path, name: str, args: list[str], env: dict) -> None:
    """One command's stdout, stderr and exit code into OUT/name.{out,err,rc}."""
    r = subprocess.run(
        [sys.executable, "-m", "geodiag.cli", *args], capture_output=True, text=True, env=env
    )
    (out / f"{name}.out").write_text(r.stdout)
    (out / f"{name}.err").write_text(r.stderr)
    (out / f"{name}.rc").write_text(f"{r.returncode}\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("fixtures", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--demo", type=Path, help="make demo's run folder (runs/demo)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    env = {
        k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY")
    }
    ckpts = _fixtures(args.fixtures.resolve())
    for c in ckpts:
        n = c.name
        _run(args.out, f"metrics-{n}", ["metrics", str(c)], env)
        _run(args.out, f"metrics-json-{n}", ["metrics", str(c), "--json"], env)
        _run(
            args.out,
            f"check-{n}",
            ["check", str(c), "--junit", str(args.out / f"junit-{n}.xml")],
            env,
        )
        _run(args.out, f"check-json-{n}", ["check", str(c), "--json"], env)
    gh = dict(env, GITHUB_ACTIONS="true", GITHUB_STEP_SUMMARY=str(args.out / "summary.md"))
    _run(args.out, "check-github", ["check", *map(str, ckpts)], gh)
    _run(args.out, "check-quiet", ["check", "-q", *map(str, ckpts)], env)
    _run(args.out, "drift", ["drift", str(ckpts[0]), str(ckpts[4])], env)
    _run(args.out, "drift-json", ["drift", str(ckpts[0]), str(ckpts[4]), "--json"], env)
    _run(args.out, "report", ["report", *map(str, ckpts[:5]), "-o", str(args.out / "r.html")], env)
    if args.demo:
        demo = sorted(p.parent for p in args.demo.resolve().glob("seed-*/*/*/model.safetensors"))
        for c in demo:
            n = f"demo-{c.parent.name}-{c.name}"
            _run(args.out, f"metrics-json-{n}", ["metrics", str(c), "--json"], env)
            _run(args.out, f"check-{n}", ["check", str(c)], env)
        _run(
            args.out,
            "demo-report",
            ["report", *map(str, demo), "-o", str(args.out / "demo.html")],
            env,
        )
    for html in args.out.glob("*.html"):
        html.unlink()  # PNG bytes depend on matplotlib; the JSON beside it is compared
    for f in args.out.iterdir():  # the two runs differ in OUT and the clock only
        text = f.read_text().replace(str(args.out), "OUT")
        f.write_text(re.sub(r'"generated": "[^"]*"', '"generated": "-"', text))


if __name__ == "__main__":
    main()
