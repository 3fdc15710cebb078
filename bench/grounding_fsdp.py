"""What ``gti init --fsdp`` costs against data-parallel grounding (DDP), 2 gloo processes.

On the init tests' tiny world (tests/gti/init/initworld.py: a 2-layer Llama, d = 64, its
word-level vocabulary + 9 SID tokens, the chat template's shared system turn), the same
``torchrun`` command with and without ``--fsdp``, interleaved, each a fresh launch:
parameters each process holds (``init_config.json``'s ``parameters_per_process`` under
FSDP2; the whole model under DDP) and the median step time of the train log (steps after
the first; the launch, loading and saving are not in it). One thread per process.

    PYTHONPATH=. python bench/grounding_fsdp.py --steps 20 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "gti"), str(ROOT / "tests" / "gti" / "init")]

from initworld import build_world  # noqa: E402
from launch import free_port  # noqa: E402


def launch(sids: Path, out: Path, steps: int, batch: int, fsdp: bool) -> dict[str, object]:
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
        "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
        "-m", "gti.cli", "init", "--sids", str(sids), "-o", str(out), "--strategy", "gti",
        "--steps", str(steps), "--batch-size", str(batch), "--structure-every", "0",
        "--device", "cpu", "--no-progress", *(["--fsdp"] if fsdp else []),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    subprocess.run(cmd, check=True, capture_output=True, env=env)
    log = [json.loads(x) for x in (out / "train_log.jsonl").read_text().splitlines()]
    seconds = [float(r["seconds"]) for r in log if "loss" in r][1:]
    config = json.loads((out / "init_config.json").read_text())
    total = sum(t.numel() for t in load_file(out / "model.safetensors").values())
    return {
        "step_s": statistics.median(seconds),
        "parameters_per_process": config.get("parameters_per_process", [total, total]),
        "total": total,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        world = build_world(Path(tmp) / "world", chat=True)
        runs: dict[str, list[dict[str, object]]] = {"ddp": [], "fsdp": []}
        for i in range(args.repeats):
            for arm in runs:
                out = Path(tmp) / f"{arm}{i}"
                runs[arm].append(
                    launch(world.sids_dir, out, args.steps, args.batch_size, arm == "fsdp")
                )
    print(f"{'arm':5} {'params/process':>16} {'bytes/process':>14} {'step s (median)':>16}")
    for arm, rs in runs.items():
        per = rs[0]["parameters_per_process"]
        step = statistics.median(r["step_s"] for r in rs)  # type: ignore[misc]
        print(f"{arm:5} {str(per):>16} {4 * max(per):>14,} {step:>16.4f}")  # type: ignore[arg-type]
    ratio = statistics.median(r["step_s"] for r in runs["fsdp"]) / statistics.median(
        r["step_s"] for r in runs["ddp"]
    )  # type: ignore[operator]
    print(f"fsdp / ddp step time: {ratio:.2f}x; every run: ", end="")
    print({a: [round(r["step_s"], 4) for r in rs] for a, rs in runs.items()})  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
