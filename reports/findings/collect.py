"""Per-token findings of every arm of a ``gti experiment`` run, at init and after SFT: how
many new tokens stay untrained, and whether the codes few items use stay behind.

    .venv/bin/python reports/findings/collect.py runs/cpu --out reports/findings/cpu

For each arm (the run's experiment.json: arms, seeds) the init checkpoint is analyzed
alone and the SFT checkpoint with ``--reference`` its init (geodiag.analyze, default
settings), so "barely moved" applies after SFT. Writes ``findings.json`` (counts, the
usage buckets, the codebook's health: no weights, no token rows) and ``findings.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from geodiag.analysis.checkpoint import measure_checkpoint  # noqa: E402

from geodiag.analysis.options import AnalyzeOptions
from geodiag.io.sources.options import ReadOptions  # noqa: E402
from gti.experiment.layout import experiment_paths  # noqa: E402

FINDINGS = ("at_vocabulary_mean", "zero", "barely_moved", "dead_codes", "norm_small", "norm_large")


def _size(group) -> int:
    return 0 if group is None else group.size


def summary(path: Path, reference: Path | None) -> dict:
    read = ReadOptions(reference=str(reference)) if reference else ReadOptions()
    rep = measure_checkpoint(path, AnalyzeOptions(n_permutations=0), read=read)
    m = rep.matrices[0]
    u = m.untrained
    out = {
        "checkpoint": str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path),
        "reference": None if reference is None else str(reference.name),
        "n_new": m.n_new,
        "n_untrained": u.n_untrained,
        "n_identical_groups": u.n_groups,
        **{f"n_{k}": _size(getattr(u, k)) for k in FINDINGS},
        "movement_threshold": None if u.movement is None else u.movement.threshold,
        "movement_yardstick": None if u.movement is None else u.movement.yardstick,
        "centered_effective_rank": m.new.centered.effective_rank,
        "spread_relative": m.new.spread_relative,
        "usage_buckets": [
            {
                "items_per_code": [b.min_items, b.max_items],
                "n_tokens": b.n_tokens,
                "n_untrained": b.n_untrained,
                "median_movement": b.median_movement,
            }
            for b in u.usage_movement
        ],
        "movement_basis": u.movement_basis,
    }
    if rep.codebook is not None:
        out["dead_codes_per_level"] = {lv.name: lv.n_dead for lv in rep.codebook.levels}
    return out


def collect(run: Path) -> dict:
    cfg = json.loads((run / "experiment.json").read_text())
    arms = {}
    for seed in cfg["seeds"]:
        for arm in cfg["arms"]:
            paths = experiment_paths(run, arm, seed)
            if not (paths.sft / "semantic_ids.json").is_file():
                print(f"skip {arm} seed {seed}: no SFT checkpoint yet", file=sys.stderr)
                continue
            print(f"{arm} seed {seed}", file=sys.stderr)
            arms[f"{arm}-seed{seed}"] = {
                "init": summary(paths.init, None),
                "sft": summary(paths.sft, paths.init),
            }
    return {"run": cfg["name"], "sft_steps": cfg["sft"]["steps"], "arms": arms}


def markdown(res: dict) -> str:
    lines = [
        f"# Per-token findings: `{res['run']}` run ({res['sft_steps']} SFT steps)",
        "",
        "Written by `reports/findings/collect.py` (its docstring gives the command). SFT",
        "rows are measured against their init (`--reference`): *barely moved* is a row",
        "that moved less than 2% of the original rows' median movement.",
        "",
        "| arm | untrained at init | untrained after SFT | of which barely moved "
        "| identical groups after SFT | dead codes (untrained) | centered eff. rank init -> SFT |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, a in res["arms"].items():
        i, s = a["init"], a["sft"]
        lines.append(
            f"| {name} | {i['n_untrained']} / {i['n_new']} | {s['n_untrained']} / {s['n_new']} "
            f"| {s['n_barely_moved']} | {s['n_identical_groups']} | {s['n_dead_codes']} "
            f"| {i['centered_effective_rank']:.1f} -> {s['centered_effective_rank']:.1f} |"
        )
    lines += [
        "",
        "## Do rarely used codes stay behind? (after SFT)",
        "",
        "Tokens bucketed by how many items use their code; untrained count and median",
        "movement since init (embedding units).",
        "",
    ]
    for name, a in res["arms"].items():
        b = a["sft"]["usage_buckets"]
        if not b:
            continue
        lines += [f"**{name}**", "", "| items per code | tokens | untrained | median movement |"]
        lines.append("|---|---|---|---|")
        for x in b:
            lo, hi = x["items_per_code"]
            label = str(lo) if lo == hi else f"{lo}-{hi}"
            lines.append(
                f"| {label} | {x['n_tokens']} | {x['n_untrained']} | {x['median_movement']:.3g} |"
            )
        lines.append("")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a gti experiment output folder (runs/cpu)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    res = collect(args.run)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "findings.json").write_text(json.dumps(res, indent=1) + "\n")
    (args.out / "findings.md").write_text(markdown(res))
    print(f"wrote {args.out / 'findings.md'}")


if __name__ == "__main__":
    main()
