"""Print the structure curve of probe runs: step, train s, RSA a/b/c (p), acc a/sid, mean cos, spread, measure s."""

import json
import sys

for run in sys.argv[1:]:
    print("==", run)
    for l in open(f"runs/probe/{run}/log.jsonl"):
        d = json.loads(l)
        if "structure" in d:
            s = d["structure"]

            def f(x):
                return "  none" if x is None else f"{x:6.3f}"

            rsa = " ".join(
                f"{f(s['rsa'][k])}({s['rsa_p'][k] if s['rsa_p'][k] is None else round(s['rsa_p'][k], 3)})"
                for k in "abc"
            )
            print(
                f"{d['step']:4d} {d['elapsed_s']:7.0f}s rsa {rsa} acc {s['code_accuracy']['a']:.3f}/{s['code_accuracy']['sid']:.3f} cos {f(s['mean_cosine'])} spread {f(s['spread_ratio'])} erank {f(s['effective_rank_ratio'])} m {d['measure_s']:.1f}s"
            )
