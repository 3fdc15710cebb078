"""Markdown table of probe runs: settings, examples, training wall/CPU seconds, load, final structure."""

import json
import sys

print(
    "| run | optimizer, lr, batch, t2s:s2t | examples | train wall s | train CPU s | load (1 min, mean) | RSA a (p) | RSA b (p) | RSA c (p) | acc a / sid | mean cos | spread |"
)
print("|---|---|---:|---:|---:|---:|---|---|---|---|---:|---:|")
for run in sys.argv[1:]:
    lines = [json.loads(l) for l in open(f"runs/probe/{run}/log.jsonl")]
    a = lines[0]["args"]
    steps = [l for l in lines if "loss" in l]
    st = [l for l in lines if "structure" in l][-1]
    s = st["structure"]
    cpu = sum(l.get("cpu_seconds", 0) for l in steps)
    load = sum(l.get("load1", 0) for l in steps) / max(len(steps), 1)

    def f(k):
        return f"{s['rsa'][k]:.3f} ({s['rsa_p'][k]:.2g})" if s["rsa"][k] is not None else "undef."

    opt = f"{a['optimizer']} {a['lr']}" + (f" eps {a['eps']}" if a["eps"] != "1e-08" else "")
    cpu_s = f"{cpu:.0f}" if cpu else "n/a"
    load_s = f"{load:.1f}" if load else "n/a"
    print(
        f"| {run} | {opt}, b{a['batch_size']}, {a['repeats'].replace(',', ':')} | {st['step'] * int(a['batch_size'])} | {st['elapsed_s']:.0f} | {cpu_s} | {load_s} | {f('a')} | {f('b')} | {f('c')} | {s['code_accuracy']['a']:.3f} / {s['code_accuracy']['sid']:.3f} | {s['mean_cosine']:.3f} | {s['spread_ratio']:.3f} |"
    )
