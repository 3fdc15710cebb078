"""Checking a checkpoint behind a URL in place against downloading it first, in one run;
prints the bytes and the ratios (issue 32: "bytes within 1.2x of headers + tokenizer files
+ new rows + sample; >= 20x faster than snapshot_download + check").

The checkpoint: a save_pretrained-like safetensors folder of --size-mb (two shards and
their index): an embedding of --vocab x --dim F16 whose last 768 rows are SID tokens
(``semantic_ids.json``: 3 levels x 256 codes, tokenizer.json and config.json beside),
and F16 layer tensors for the rest. Written once into --workdir, served by
tests/geodiag/io/range_server.py (HEAD, GET, byte ranges, a JSON line per request with
the bytes sent) throttled to --mbit megabits per second, all connections together.

Arms, each in a fresh process and against a fresh server log, once each:

1. geodiag: ``geodiag check http://127.0.0.1:PORT/FOLDER``.
2. naive: every file of the folder downloaded whole over HTTP (what
   ``huggingface_hub.snapshot_download`` does; the server has no Hub API to list them,
   so the bench names them), then ``geodiag check`` on the local copy, which is then
   deleted.

Both checks must pass (exit 0; the fixture is built to), and their peak RSS (``ru_maxrss``)
is printed. The lower bound printed is what the issue's goal counts: the safetensors
headers, the small files geodiag fetches, the new rows and the reference sample (as many
original rows as new ones). A remote vocabulary's figures come from that same sample,
rounded up to whole blocks (geodiag.analysis.rows.vocabulary_sample_size); what
``--full-vocabulary`` would read (headers, small files and the whole embedding) is
printed beside.

Usage: PYTHONPATH=. .venv/bin/python bench/remote_read.py [--size-mb 1100] [--mbit 100]
       [--vocab 150000] [--dim 1024] [--workdir .cache/bench-remote]
"""

from __future__ import annotations

import argparse
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
from read_path import run_child
from usage_count import machine

from geodiag.analysis.options import AnalyzeOptions
from geodiag.io.formats.safetensors import save_file
from geodiag.io.sources.remote import SMALL_FILES
from geodiag.io.vocabulary import sidecar
from tests.geodiag.geodiag_fixtures import tokenizer_json
from tests.geodiag.io.range_server import read_log

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "tests" / "geodiag" / "io" / "range_server.py"
LEVELS = (("a", 256), ("b", 256), ("c", 256))
N_NEW = sum(k for _, k in LEVELS)
EMBEDDING = "model.embed_tokens.weight"
LAYER_ROWS = 4096  # each layer tensor (4096, dim) F16

DOWNLOAD = r"""
import shutil, sys, urllib.request
from pathlib import Path
url, dest, names = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
dest.mkdir(parents=True)
for name in names:
    with urllib.request.urlopen(f"{url}/{name}") as r, open(dest / name, "wb") as f:
        shutil.copyfileobj(r, f, 1 << 20)
"""


def checkpoint(workdir: Path, size_mb: int, vocab: int, dim: int) -> Path:
    """The folder, written once: shard 1 the embedding, shard 2 the layers."""
    n_layers = max(0, round((size_mb * 2**20 - vocab * dim * 2) / (2 * LAYER_ROWS * dim)))
    out = workdir / f"ckpt-{vocab}x{dim}-f16-{n_layers}layers"
    if (out / "config.json").is_file():
        return out
    out.mkdir(parents=True, exist_ok=True)
    n_base = vocab - N_NEW
    rng = np.random.default_rng(0)
    scales = np.linspace(0.05, 0.005, dim, dtype=np.float32)  # a spectrum, as real rows have
    emb = np.empty((vocab, dim), np.float16)
    for s in range(0, vocab, 16384):
        n = min(16384, vocab - s)
        emb[s : s + n] = rng.standard_normal((n, dim), dtype=np.float32) * scales
    shards = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    save_file({EMBEDDING: emb}, out / shards[0])
    del emb
    layers = {
        f"model.layers.{i}.mlp.up_proj.weight": np.full((LAYER_ROWS, dim), 0.01, np.float16)
        for i in range(n_layers)
    }
    save_file(layers, out / shards[1])
    weight_map = {EMBEDDING: shards[0], **{name: shards[1] for name in layers}}
    (out / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    names = [sidecar.token_string(lv, c) for lv, k in LEVELS for c in range(k)]
    (out / "tokenizer.json").write_text(json.dumps(tokenizer_json(n_base, names)))
    levels, next_id = [], n_base
    for name, k in LEVELS:
        levels.append(sidecar.Level(name, k, list(range(next_id, next_id + k))))
        next_id += k
    items = {f"item{i}": [int(rng.integers(k)) for _, k in LEVELS] for i in range(1000)}
    prov = {"init_strategy": "random", "stage": "init", "step": 0, "seed": 0}
    sidecar.save(sidecar.SemanticIds(n_base, levels, items, prov), out)
    config = {"model_type": "llama", "hidden_size": dim, "vocab_size": vocab}
    (out / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": True}))
    return out


def lower_bound(folder: Path, vocab: int, dim: int) -> dict:
    """The issue's floor: headers + the small files fetched + new rows + sample, in bytes."""
    headers = 0
    for shard in folder.glob("*.safetensors"):
        with open(shard, "rb") as f:
            headers += 8 + struct.unpack("<Q", f.read(8))[0]
    small = sum((folder / n).stat().st_size for n in SMALL_FILES if (folder / n).is_file())
    n_base = vocab - N_NEW
    n_sample = min(N_NEW, AnalyzeOptions().reference_cap, n_base)
    row = 2 * dim
    return {
        "headers": headers,
        "small_files": small,
        "new_rows": N_NEW * row,
        "sample": n_sample * row,
        "total": headers + small + (N_NEW + n_sample) * row,
        "embedding": vocab * row,
    }


class Server:
    def __init__(self, root: Path, log: Path, mbit: float) -> None:
        log.unlink(missing_ok=True)
        self.log = log
        cmd = [sys.executable, str(SERVER), str(root), str(log), "--rate", str(mbit)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        self.url = f"http://127.0.0.1:{int(self.proc.stdout.readline())}"

    def requests(self) -> list[dict]:
        return read_log(self.log)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def run(cmd: list[str]) -> tuple[float, float]:
    """(wall s, peak RSS MiB) of one child, through read_path's wrapper: a child forked
    from this process would count the generator's pages in its ru_maxrss."""
    return run_child(cmd, ROOT)[:2]


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--size-mb", type=int, default=1100, help="the checkpoint's size")
    ap.add_argument("--mbit", type=float, default=100.0, help="the link, megabits per second")
    ap.add_argument("--vocab", type=int, default=150_000)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--workdir", type=Path, default=ROOT / ".cache" / "bench-remote")
    args = ap.parse_args()
    print(machine())
    folder = checkpoint(args.workdir, args.size_mb, args.vocab, args.dim)
    files = sorted(f.name for f in folder.iterdir())
    size = sum((folder / f).stat().st_size for f in files)
    floor = lower_bound(folder, args.vocab, args.dim)
    print(f"{folder.name}: {size / 1e9:.2f} GB in {len(files)} files; link {args.mbit} Mbit/s")
    print(machine())
    geodiag = [sys.executable, "-m", "geodiag.cli", "check"]

    server = Server(args.workdir, args.workdir / "geodiag.jsonl", args.mbit)
    try:
        g_wall, g_rss = run([*geodiag, f"{server.url}/{folder.name}"])
        g_log = server.requests()
    finally:
        server.stop()
    print(machine())
    local = args.workdir / "download"
    shutil.rmtree(local, ignore_errors=True)
    server = Server(args.workdir, args.workdir / "naive.jsonl", args.mbit)
    try:
        d_wall, _ = run(
            [sys.executable, "-c", DOWNLOAD, f"{server.url}/{folder.name}", str(local), *files]
        )
        n_log = server.requests()
    finally:
        server.stop()
    c_wall, c_rss = run([*geodiag, str(local)])
    shutil.rmtree(local)
    print(machine())

    g_bytes = sum(r["bytes"] for r in g_log)
    n_bytes = sum(r["bytes"] for r in n_log)
    per_file: dict[str, int] = {}
    for r in g_log:
        name = r["path"].rsplit("/", 1)[-1]
        per_file[name] = per_file.get(name, 0) + r["bytes"]
    mb = 1e6
    now = floor["headers"] + floor["small_files"] + floor["embedding"]
    print(
        f"geodiag check URL: {g_wall:.1f} s, {g_rss:.0f} MiB, "
        f"{g_bytes / mb:.1f} MB in {len(g_log)} requests ({json.dumps(per_file)})\n"
        f"download every file + geodiag check: {d_wall + c_wall:.1f} s "
        f"(download {d_wall:.1f} s, check {c_wall:.1f} s / {c_rss:.0f} MiB), "
        f"{n_bytes / mb:.1f} MB\n"
        f"lower bound (headers {floor['headers']:,} + small files {floor['small_files']:,} + "
        f"new rows {floor['new_rows']:,} + sample {floor['sample']:,} B): "
        f"{floor['total'] / mb:.2f} MB; geodiag's bytes are {g_bytes / floor['total']:.2f}x it "
        f"(goal <= 1.2x); headers + small files + the whole embedding "
        f"({floor['embedding'] / mb:.1f} MB), what --full-vocabulary reads: "
        f"{now / mb:.1f} MB\n"
        f"ratios: {n_bytes / g_bytes:.1f}x fewer bytes, {(d_wall + c_wall) / g_wall:.1f}x faster "
        f"(goal >= 20x)"
    )


if __name__ == "__main__":
    main()
