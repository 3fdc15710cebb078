"""The held-out probe again, on the output folders run.py's arms wrote, with the probe of
today's gti (gti.dropin.probe: constrained to the index's SIDs, and free): for outputs
written before the probe decoded under the index's trie. Reads each OUT/init_config.json
for the index, item file, held-out count and seed, so the held-out items are the arm's own.

    .venv/bin/python reports/dropin_smollm2/reprobe.py runs/dropin_smollm2/{mean,description-mean,gti}

Writes reprobe.json beside this script (no weights) and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from gti.dropin.index import read_index
from gti.dropin.probe import probe
from gti.dropin.run import split_holdout, texts_of
from gti.init.config import InitConfig

HERE = Path(__file__).resolve().parent


def reprobe(out: Path) -> dict[str, object]:
    cfg = json.loads((out / "init_config.json").read_text())
    source = json.loads((out / "gti_sid_source.json").read_text())
    codebooks = Path(source["codebooks"]) if source.get("codebooks") else None
    index = read_index(Path(cfg["sids"]), codebooks, None)
    texts = texts_of(index, InitConfig(items=Path(cfg["items"]), text_fields=cfg["text_fields"]))
    held_out, _ = split_holdout(list(texts), cfg["holdout"], cfg["seed"], index.items)
    max_chars = (cfg.get("grounding") or {}).get("max_text_chars", 400)
    ask = cfg["templates"]["text_to_sid"][0]
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    t0 = time.perf_counter()
    res = probe(model, tokenizer, index, held_out, texts, max_chars, ask)
    return {
        "arm": out.name,
        "strategy": cfg["strategy"],
        "seconds": time.perf_counter() - t0,
        "after": asdict(res),
        "line": res.line(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outs", nargs="+", type=Path)
    args = ap.parse_args(argv)
    rows = []
    for out in args.outs:
        r = reprobe(out)
        print(f"{r['arm']}: {r['line']} ({r['seconds']:.0f} s)", file=sys.stderr, flush=True)
        rows.append(r)
    (HERE / "reprobe.json").write_text(json.dumps(rows, indent=1, allow_nan=False) + "\n")
    print("| arm | exact match, constrained | free | position accuracy, constrained |")
    print("|---|---|---|---|")
    for r in rows:
        a = r["after"]
        acc = ", ".join(f"{x:.3f}" for x in a["position_accuracy"])
        print(f"| {r['arm']} | {a['exact_match']:.3f} | {a['exact_match_free']:.3f} | {acc} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
