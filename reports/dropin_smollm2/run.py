"""gti init's drop-in route on a real pretrained model: SmolLM2-135M-Instruct over an
LC-Rec-format index, one arm per strategy, compared on what the drop-in prints.

    OMP_WAIT_POLICY=PASSIVE .venv/bin/python reports/dropin_smollm2/run.py \
        [--work runs/dropin_smollm2] [--steps 120] [--strategies mean,description-mean,gti]

The index and item file are the tests' LC-Rec fixture (tests/gti/dropin/lcrec_world.py,
2,048 items drawn, 4 levels x 16 codes, written as LC-Rec writes them; each code has its
own word in the item's text, so text -> SID is learnable). Every arm runs

    gti init --sids Toys.index.json --items Toys.item.json --codebooks Toys.pth \
        --model ~/.cache/gti/models/smollm2-135m --strategy S --preset cpu --steps N -o OUT
    geodiag check OUT --sids Toys.index.json --codebooks Toys.pth --json

and results.json (beside this script) keeps, per arm: the held-out probe before and after
(exact match of greedy text -> SID on the 64 held-out items, accuracy per SID position,
RSA per level between the new rows and the codebook rows of their codes), the grounding
loss per direction at its first and last steps (gti), `geodiag check`'s verdict and RSA
per level, wall seconds and the machine's load. No weights are kept.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MODEL = Path("~/.cache/gti/models/smollm2-135m").expanduser()


def sh(cmd: list[str]) -> subprocess.CompletedProcess:
    print("$", " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=ROOT)


def gate_summary(gate: dict) -> dict[str, object]:
    """`geodiag check --json` in brief: passed, and each check's status and value (RSA per
    level among them, as rsa[a], rsa[b], ...)."""
    checks = [c for r in gate["results"] for c in r["checks"] if c["status"] != "skip"]
    return {
        "passed": gate["passed"],
        "checks": {c["name"]: {"status": c["status"], "value": c["value"]} for c in checks},
    }


def losses(log: Path) -> dict[str, object]:
    """First and last logged grounding step: loss overall and per direction."""
    steps = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    steps = [s for s in steps if "loss" in s]
    if not steps:
        return {}
    keep = ("step", "loss", "loss_text_to_sid", "loss_sid_to_text", "seconds")
    pick = [steps[0], *steps[-5:]]
    return {
        "first": {k: v for k, v in pick[0].items() if k in keep or k.startswith("loss")},
        "last5": [
            {k: v for k, v in s.items() if k in keep or k.startswith("loss")} for s in pick[1:]
        ],
        "steps": len(steps),
        "train_seconds": sum(float(s["seconds"]) for s in steps),
    }


def fmt(v: object) -> str:
    return "undefined" if v is None else f"{v:.3f}"


def table(results: dict) -> str:
    """results.md: one row per arm, the probe before -> after and `geodiag check`."""
    rows = [
        "| strategy | exact match before -> after | position accuracy after | RSA a, b, c, d before -> after | geodiag check | text -> SID loss first -> last | wall |",
        "|---|---|---|---|---|---|---:|",
    ]
    for name, arm in results["arms"].items():
        before, after = arm["probe"]["before"], arm["probe"]["after"]
        rsa = ", ".join(f"{fmt(before['rsa'][k])} -> {fmt(after['rsa'][k])}" for k in after["rsa"])
        g = arm.get("grounding") or {}
        loss = (
            f"{g['first']['loss_text_to_sid']:.2f} -> {g['last5'][-1]['loss_text_to_sid']:.2f} ({g['steps']} steps)"
            if g
            else "-"
        )
        acc = ", ".join(f"{a:.2f}" for a in after["position_accuracy"])
        verdict = "PASS" if arm["geodiag_check"]["passed"] else "FAIL"
        rows.append(
            f"| {name} | {fmt(before['exact_match'])} -> {fmt(after['exact_match'])} | {acc} "
            f"| {rsa} | {verdict} | {loss} | {arm['wall_seconds']:.0f} s (load {arm['load_average'][0]}-{arm['load_average'][1]}) |"
        )
    return "\n".join(rows) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "dropin_smollm2")
    ap.add_argument("--model", type=Path, default=MODEL)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--strategies", default="mean,description-mean,gti")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results.json")
    ap.add_argument("--table", action="store_true", help="only write results.md from --out")
    args = ap.parse_args()
    if args.table:
        args.out.with_suffix(".md").write_text(table(json.loads(args.out.read_text())))
        return

    data = args.work / "data"
    if not (data / "Toys.index.json").exists():
        sh(
            [str(BIN / "python"), "tests/gti/dropin/lcrec_world.py", str(data), "2048"]
        ).check_returncode()
    index, items, books = (data / f"Toys.{s}" for s in ("index.json", "item.json", "pth"))
    results = json.loads(args.out.read_text()) if args.out.exists() else {"arms": {}}
    for strategy in args.strategies.split(","):
        out = args.work / strategy
        cmd = [str(BIN / "gti"), "init", "--sids", str(index), "--items", str(items)]
        cmd += ["--codebooks", str(books), "--model", str(args.model), "--strategy", strategy]
        cmd += ["--preset", "cpu", "--steps", str(args.steps), "--no-progress", "-o", str(out)]
        load0, t0 = os.getloadavg()[0], time.perf_counter()
        done = sh(cmd)
        wall = time.perf_counter() - t0
        if done.returncode != 0:
            raise SystemExit(f"gti init failed ({done.returncode}):\n{done.stderr[-4000:]}")
        gate = sh(
            [
                str(BIN / "geodiag"),
                "check",
                str(out),
                "--sids",
                str(index),
                "--codebooks",
                str(books),
                "--json",
            ]
        )
        checks = json.loads((out / "gti_checks.json").read_text())
        log = out / "train_log.jsonl"
        results["arms"][strategy] = {
            "command": " ".join(Path(c).name if c.startswith(str(BIN)) else c for c in cmd),
            "probe": checks["probe"],
            "printed": (out / "gti_checks.txt").read_text(),
            "geodiag_check_exit": gate.returncode,
            "geodiag_check": gate_summary(json.loads(gate.stdout)),
            "grounding": losses(log) if log.exists() else None,
            "wall_seconds": round(wall, 1),
            "load_average": [round(load0, 2), round(os.getloadavg()[0], 2)],
            "date_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M"),
        }
        results["machine"] = "AMD EPYC, 2 cores (shared with other sessions)"
        results["model"] = (
            "SmolLM2-135M-Instruct (" + str(args.model).replace(str(Path.home()), "~") + ")"
        )
        args.out.write_text(json.dumps(results, indent=1) + "\n")
        print(checks["probe"]["after"], f"{wall:.0f} s", flush=True)
    args.out.with_suffix(".md").write_text(table(results))


if __name__ == "__main__":
    main()
