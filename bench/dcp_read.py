"""Reading a torch.distributed.checkpoint folder in place against consolidating it, in one
run; prints the ratios (issue 32: ">= 5x in time and in peak memory, memory flat in the
checkpoint's size").

The checkpoint: a 2-rank FSDP2 run (two spawned gloo processes, ``fully_shard`` per layer
and on the whole model, ``dcp.save(model.state_dict())``, as
tests/geodiag/io/formats/dcp_fsdp2_run.py does) of a Llama-shaped model: an embedding of
--vocab x --dim float32 whose last --new rows are the new tokens, and as many
(4 dim, dim) layers as reach --size-mb. Written once per size into --workdir.

Arms, each in a fresh process, interleaved, medians of --repeats:

1. read (the issue's comparison, the same work as the naive arm): geodiag's store
   (``geodiag.io.formats.registry.open_store``, the DCP reader) reads the new rows and a 1,000-row
   seeded sample of original rows; torch never imported.
2. geodiag: ``geodiag metrics DCP --json --new-tokens A:B`` on the folder (the full
   analysis: the new rows, the pass over every original row for the vocabulary
   statistics and the sample, the nearest-neighbour scan), torch never imported.
3. naive: ``dcp_to_torch_save`` into a temporary file, ``torch.load``, slicing the new
   rows and a 1,000-row reference sample; nothing measured.

Memory: peak RSS (``ru_maxrss`` of each child); the geodiag arm also on a checkpoint of
--small-mb with the same embedding. CPU model and load are printed before and after.

Usage: PYTHONPATH=. .venv/bin/python bench/dcp_read.py [--size-mb 1000] [--small-mb 500]
       [--vocab 100000] [--dim 1024] [--new 1000] [--repeats 3] [--workdir .cache/bench-dcp]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
from pathlib import Path

from read_path import run_child
from usage_count import machine

ROOT = Path(__file__).resolve().parent.parent
EMBEDDING = "model.embed_tokens.weight"
N_SAMPLE = 1000

NAIVE = r"""
import sys, tempfile, torch
from pathlib import Path
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
folder, name, start, end, n_sample = sys.argv[1:3] + [int(a) for a in sys.argv[3:6]]
with tempfile.TemporaryDirectory(dir=Path(folder).parent) as tmp:
    dcp_to_torch_save(folder, Path(tmp) / "full.pt")
    state = torch.load(Path(tmp) / "full.pt", weights_only=True)
emb = state[name]
rows = emb[start:end].clone()
sample = emb[torch.randperm(start, generator=torch.Generator().manual_seed(0))[:n_sample]]
print(rows.shape[0], float(rows.double().norm()), float(sample.double().norm()))
"""


def _model(vocab: int, dim: int, n_layers: int):
    """Llama's state-dict names (model.embed_tokens, model.layers.N, lm_head), no forward."""
    import torch
    from torch import nn

    class Body(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed_tokens = nn.Embedding(vocab, dim)
            self.layers = nn.ModuleList(
                nn.Linear(dim, 4 * dim, bias=False) for _ in range(n_layers)
            )

    class LM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = Body()

    torch.manual_seed(0)
    with torch.device("meta"):
        m = LM()
    return m


def worker(
    rank: int, world: int, root: str, port: int, vocab: int, dim: int, n_layers: int, n_new: int
) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.fsdp import fully_shard

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        m = _model(vocab, dim, n_layers)
        for layer in m.model.layers:
            fully_shard(layer)
        fully_shard(m)
        # Each rank fills only its own shard: built on the meta device, no rank ever
        # holds the full model. Rows: N(0, 0.02^2); the new rows near their mean, as a
        # mean-resized init leaves them.
        m.to_empty(device="cpu")
        g = torch.Generator().manual_seed(rank)
        with torch.no_grad():
            for name, p in m.named_parameters():
                local = p.to_local()
                local.normal_(0, 0.02, generator=g)
                if name == EMBEDDING:
                    first = -(-vocab // world) * rank  # Shard(0): ceil(vocab / world) rows each
                    lo = max(vocab - n_new - first, 0)
                    if lo < local.shape[0]:
                        local[lo:] = 0.01 + 1e-3 * local[lo:]
        dcp.save(m.state_dict(), checkpoint_id=root)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def checkpoint(workdir: Path, size_mb: int, vocab: int, dim: int, n_new: int) -> Path:
    """The DCP folder of ``size_mb`` (config.json beside it), written once."""
    import torch

    n_layers = max(0, round((size_mb * 2**20 - vocab * dim * 4) / (16 * dim * dim)))
    out = workdir / f"dcp-{vocab}x{dim}-{n_layers}layers"
    if (out / ".metadata").is_file():
        return out
    out.mkdir(parents=True, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.multiprocessing.spawn(
        worker, args=(2, str(out), port, vocab, dim, n_layers, n_new), nprocs=2, join=True
    )
    config = {"model_type": "llama", "hidden_size": dim, "vocab_size": vocab}
    (out / "config.json").write_text(json.dumps(config))
    return out


def size_gb(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.iterdir()) / 1e9


READ = r"""
import sys, numpy as np
from geodiag.io.formats.registry import open_store
folder, name, start, end, n_sample = sys.argv[1:3] + [int(a) for a in sys.argv[3:6]]
store = open_store(folder)
rows = store.read_rows(name, np.arange(start, end))
pick = np.sort(np.random.default_rng(0).choice(start, size=n_sample, replace=False))
sample = store.read_rows(name, pick)
assert "torch" not in sys.modules
print(rows.shape[0], float(np.linalg.norm(rows)), float(np.linalg.norm(sample)))
"""


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--size-mb", type=int, default=1000, help="the checkpoint's size")
    ap.add_argument("--small-mb", type=int, default=500, help="the second size (geodiag RSS)")
    ap.add_argument("--vocab", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--new", type=int, default=1000, help="new tokens: the last rows")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=ROOT / ".cache" / "bench-dcp")
    args = ap.parse_args()
    print(machine())
    big = checkpoint(args.workdir, args.size_mb, args.vocab, args.dim, args.new)
    small = checkpoint(args.workdir, args.small_mb, args.vocab, args.dim, args.new)
    start, end = args.vocab - args.new, args.vocab
    print(f"{big.name}: {size_gb(big):.2f} GB; {small.name}: {size_gb(small):.2f} GB")
    print(machine())
    geodiag = [sys.executable, "-m", "geodiag.cli", "metrics", "--json"]
    span = ["--new-tokens", f"{start}:{end}"]
    naive = [sys.executable, "-c", NAIVE, str(big), EMBEDDING, str(start), str(end), str(N_SAMPLE)]
    read = [sys.executable, "-c", READ, str(big), EMBEDDING, str(start), str(end), str(N_SAMPLE)]
    runs: dict[str, list[tuple[float, float]]] = {
        "read": [],
        "geodiag": [],
        "naive": [],
        "small": [],
    }
    for _ in range(args.repeats):
        runs["read"].append(run_child(read, ROOT)[:2])
        wall, rss, out = run_child([*geodiag, str(big), *span], ROOT)
        runs["geodiag"].append((wall, rss))
        runs["naive"].append(run_child(naive, ROOT)[:2])
        runs["small"].append(run_child([*geodiag, str(small), *span], ROOT)[:2])
    report = json.loads(out)
    med = {k: [statistics.median(r[j] for r in v) for j in range(2)] for k, v in runs.items()}
    print(machine())
    r, g, n, s = med["read"], med["geodiag"], med["naive"], med["small"]
    print(
        f"{args.vocab:,} x {args.dim} F32 embedding, {args.new:,} new rows, 2-rank FSDP2 DCP "
        f"of {size_gb(big):.2f} GB, medians of {args.repeats}:\n"
        f"  geodiag's store, the new rows and a {N_SAMPLE:,}-row sample: {r[0]:.2f} s / "
        f"{r[1]:.0f} MiB\n"
        f"  geodiag metrics --json: {g[0]:.2f} s / {g[1]:.0f} MiB "
        f"({report['n_new_tokens']:,} new tokens, {report['store']})\n"
        f"  dcp_to_torch_save + torch.load + slicing: {n[0]:.2f} s / {n[1]:.0f} MiB\n"
        f"  ratio, reading the rows: {n[0] / r[0]:.1f}x time, {n[1] / r[1]:.1f}x peak RSS "
        f"(goal >= 5x both)\n"
        f"  ratio, the whole analysis: {n[0] / g[0]:.1f}x time, {n[1] / g[1]:.1f}x peak RSS\n"
        f"  geodiag on {size_gb(small):.2f} GB (same embedding): {s[0]:.2f} s / {s[1]:.0f} MiB: "
        f"RSS x{g[1] / s[1]:.2f} for x{size_gb(big) / size_gb(small):.2f} the checkpoint"
    )
    print(json.dumps({"runs": runs}))


if __name__ == "__main__":
    main()
