"""Structure entries of a running gti init (from its resume state)."""

import sys

import torch

s = torch.load(sys.argv[1], weights_only=True)
for e in s["log"]:
    if "structure" in e:
        t = e["structure"]
        print(
            e["step"],
            round(e["elapsed_s"]),
            round(e["measure_s"], 1),
            {k: v and round(v, 3) for k, v in t["rsa"].items()},
            {k: v and round(v, 3) for k, v in t["rsa_p"].items()},
            t["code_accuracy"],
            round(t["mean_cosine"], 3),
            round(t["spread_ratio"], 3),
        )
steps = [e for e in s["log"] if "loss" in e]
print(
    "step",
    s["step"],
    "last losses",
    [round(e["loss"], 2) for e in steps[-5:]],
    "t2s",
    [e.get("loss_text_to_sid") and round(e["loss_text_to_sid"], 2) for e in steps[-5:]],
)
