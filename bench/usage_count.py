"""Counting token usage over JSON lines against the tokenizer alone, in one run; prints
the ratio (issue 31: "within 1.5x of `tokenizers`' `encode_batch` alone on the same
file, same run, memory flat in the file size").

The tokenizer: SmolLM2-135M's tokenizer.json (gti's converted copy) with 768 Semantic-ID
tokens ``<a_0>..<a_255>``, ``<b_0>..``, ``<c_0>..`` added by ``Tokenizer.add_tokens``, as
a user extends it. The data: --size MiB of SFT-like JSON lines (``{"text": ...}`` and
chat ``{"messages": [...]}`` records: viewing histories of item titles with their SID
tokens, a recommendation to answer), written once from a fixed seed into --workdir.

Arms, each in a fresh process, interleaved (A B C A B C ...), medians and spread of
--repeats runs (time from opening the file to the last batch, imports and tokenizer
loading excluded):

1. ``geodiag.io.usage.count_file``: json.loads per line, batches, encode_batch_fast,
   bincount of the ids.
2. the naive alternative: the same lines, json.loads, the same batches
   (``BATCH_TEXTS`` / ``BATCH_BYTES``), ``Tokenizer.encode_batch`` alone, nothing counted.
3. the same with ``encode_batch_fast`` (no offsets), for the record: the floor of any
   count that uses the library.

Memory: peak RSS (``ru_maxrss`` of the child) of count_file on --size / 8 and on --size.
Every child runs with ``TOKENIZERS_PARALLELISM=true`` (the library's default: its rayon
pool uses every core for a batch) unless --parallelism false. CPU model and load are
printed before and after: the machine may be shared.

Usage: PYTHONPATH=. .venv/bin/python bench/usage_count.py [--size 1024] [--repeats 3]
       [--workdir .cache/bench-usage] [--parallelism true] [--baseline-tree B]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
LEVELS = "abc"
CODES = 256  # per level: <a_0>..<a_255>, <b_0>.., <c_0>..
N_ITEMS = 20_000
SEED = 0
ARMS = ("count_file", "encode_batch", "encode_batch_fast")
FETCH_HINT = (
    "SmolLM2-135M's tokenizer is not in gti's cache ({path}); fetch it once (~1 min) with "
    "`make demo`, `gti sids build --data movielens-100k --model smollm2-135m`, or "
    "`python -c 'from gti.models.smollm2 import ensure_converted; ensure_converted()'`"
)

CHILD = r"""
import json, os, resource, sys, time
arm, data, tokenizer = sys.argv[1:4]
from tokenizers import Tokenizer
from geodiag.io.usage import BATCH_BYTES, BATCH_TEXTS, count_file
encoder = Tokenizer.from_file(tokenizer)
n_vocab = encoder.get_vocab_size(with_added_tokens=True)
out = {}
t0, c0 = time.perf_counter(), time.process_time()
if arm == "count_file":
    from pathlib import Path
    source, counts = count_file(Path(data), encoder, n_vocab, say=lambda msg: None)
    # source.units counts records, as the naive arms do
    out.update(records=source.units, texts=None, tokens=int(counts.sum()),
               sid_tokens=int(counts[n_vocab - %(n_sid)d:].sum()))
else:
    encode = getattr(encoder, arm)
    records = n_texts = 0
    texts, size = [], 0
    with open(data, "rb") as f:
        for raw in f:
            record = json.loads(raw)
            records += 1
            if "text" in record:
                texts.append(record["text"])
            else:
                texts += [m["content"] for m in record["messages"]]
            size += len(raw)
            if len(texts) >= BATCH_TEXTS or size >= BATCH_BYTES:
                encode(texts, add_special_tokens=False)
                n_texts += len(texts)
                texts, size = [], 0
        if texts:
            encode(texts, add_special_tokens=False)
            n_texts += len(texts)
    out.update(texts=n_texts, records=records)
out.update(seconds=time.perf_counter() - t0, cpu=time.process_time() - c0,
           rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
print(json.dumps(out))
"""

# Words for item titles and the prompts around them; fixed, so the file is reproducible.
WORDS = (
    "love night city dark star river last time house blue story girl man war world heart "
    "road king dead secret summer winter lost wild little big good high black white red "
    "golden silent iron glass paper fire water stone ghost dream moon sun island mountain "
    "ocean street garden empire queen prince soldier hunter doctor stranger family friends "
    "brother sister mother father child killer angel devil shadow light storm rain snow "
    "journey return rise fall escape game house party wedding funeral murder mystery "
    "legend kingdom planet space machine robot time zero one two three seven hundred "
    "thousand forever never always tomorrow yesterday midnight morning evening"
).split()
GENRES = (
    "Action Adventure Animation Children's Comedy Crime Documentary Drama Fantasy "
    "Film-Noir Horror Musical Mystery Romance Sci-Fi Thriller War Western"
).split()
SYSTEM = "You are a recommender. Items are named by their Semantic IDs: three tokens each."
ASKS = (
    "Here is what I watched, oldest first:",
    "My viewing history:",
    "I liked these, in this order:",
    "Recent items:",
)
ANSWERS = ("You might enjoy", "Next, try", "Recommended:", "I suggest")


def machine() -> str:
    """lscpu's model name, the core count and the load: beside every timing."""
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    name = next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if "Model name" in ln), "")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{name or 'unknown CPU'}, {os.cpu_count()} logical CPUs, load average {load}"


def sid_tokens() -> list[str]:
    return [f"<{level}_{c}>" for level in LEVELS for c in range(CODES)]


def extended_tokenizer(workdir: Path) -> Path:
    """SmolLM2's tokenizer.json plus the SID tokens, saved once into ``workdir``."""
    from tokenizers import Tokenizer

    from gti.models.smollm2 import model_dir

    out = workdir / "tokenizer-smollm2-sid.json"
    if out.is_file():
        return out
    src = model_dir() / "tokenizer.json"  # honours $GTI_CACHE
    if not src.is_file():
        print(FETCH_HINT.format(path=src), file=sys.stderr)
        raise SystemExit(2)
    tok = Tokenizer.from_file(str(src))
    added = tok.add_tokens(sid_tokens())
    assert added == len(LEVELS) * CODES, added
    workdir.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tok.save(str(tmp))
    tmp.replace(out)
    return out


def catalogue(rng: np.random.Generator) -> list[str]:
    """N_ITEMS items as they appear in the text: 'Title Words (1995) <a_3><b_17><c_250>'."""
    items = []
    for _ in range(N_ITEMS):
        words = rng.choice(WORDS, size=int(rng.integers(1, 5)))
        title = " ".join(w.capitalize() for w in words)
        sid = "".join(
            f"<{lv}_{c}>" for lv, c in zip(LEVELS, rng.integers(CODES, size=3), strict=True)
        )
        items.append(f"{title} ({int(rng.integers(1930, 2024))}) {sid}")
    return items


def records(rng: np.random.Generator):
    """SFT-like records without end: 60% plain ``text``, 40% chat ``messages``. Drawn a
    block at a time: the file is written at ~30 MB/s rather than ~5."""
    items = catalogue(rng)
    genres = [
        ", ".join(rng.choice(GENRES, size=int(rng.integers(1, 4)), replace=False))
        for _ in range(1000)
    ]
    block = 1024
    while True:
        lengths = rng.integers(5, 30, size=block)
        picks = rng.integers(N_ITEMS, size=(block, 30))
        genre, target = rng.integers(len(genres), size=block), rng.integers(N_ITEMS, size=block)
        plain, ask = rng.random(block) < 0.6, rng.integers(len(ASKS), size=block)
        answer = rng.integers(len(ANSWERS), size=block)
        for k in range(block):
            history = [items[i] for i in picks[k, : lengths[k]]]
            g, t = genres[genre[k]], items[target[k]]
            if plain[k]:
                yield {
                    "text": f"User history: {'; '.join(history)}. Preferred genres: {g}. "
                    f"Next item: {t}"
                }
            else:
                user = f"{ASKS[ask[k]]} {', '.join(history)}. What next?"
                yield {
                    "messages": [
                        {"role": "system", "content": SYSTEM},
                        {"role": "user", "content": user},
                        {"role": "assistant", "content": f"{ANSWERS[answer[k]]} {t} ({g})."},
                    ]
                }


def synthetic_jsonl(workdir: Path, size_mib: int, seed: int = SEED) -> Path:
    """At least ``size_mib`` MiB of JSON lines, written once (same seed, same bytes; a
    smaller file is a prefix of a larger one)."""
    out = workdir / f"usage-{size_mib}mib-seed{seed}.jsonl"
    if out.is_file():
        return out
    workdir.mkdir(parents=True, exist_ok=True)
    target = size_mib << 20
    tmp = out.with_suffix(".tmp")
    done = 0
    with tmp.open("w", encoding="utf-8") as f:
        for record in records(np.random.default_rng(seed)):
            line = json.dumps(record, ensure_ascii=False) + "\n"
            f.write(line)
            done += len(line.encode())
            if done >= target:
                break
    tmp.replace(out)
    return out


def run_arm(arm: str, data: Path, tokenizer: Path, tree: Path, parallelism: str) -> dict:
    """One arm in a fresh process (the bench itself stays small: ru_maxrss survives exec,
    so a large parent would inflate the child's figure)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "TOKENIZERS_PARALLELISM": parallelism}
    code = CHILD % {"n_sid": len(LEVELS) * CODES}
    res = subprocess.run(
        [sys.executable, "-c", code, arm, str(data), str(tokenizer)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tree,
    )
    if res.returncode != 0:
        raise SystemExit(f"{arm} failed ({res.returncode}):\n{res.stderr[-3000:]}")
    return json.loads(res.stdout)


def summary(runs: list[dict], size: int) -> dict:
    secs = [r["seconds"] for r in runs]
    med = statistics.median(secs)
    return {
        "seconds": med,
        "min_s": min(secs),
        "max_s": max(secs),
        "mib_per_s": size / (1 << 20) / med,
        "cpu_s": statistics.median(r["cpu"] for r in runs),
        "rss_mib": statistics.median(r["rss_mib"] for r in runs),
        "runs": runs,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--size", type=int, default=1024, help="MiB of JSON lines (default 1024)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per arm (medians)")
    ap.add_argument("--workdir", type=Path, default=ROOT / ".cache" / "bench-usage")
    ap.add_argument("--parallelism", choices=("true", "false"), default="true")
    ap.add_argument("--baseline-tree", type=Path, help="also time count_file by this checkout")
    args = ap.parse_args()
    if args.size < 8 or args.repeats < 1:
        ap.error("--size must be >= 8 (MiB) and --repeats >= 1")

    tokenizer = extended_tokenizer(args.workdir)
    big = synthetic_jsonl(args.workdir, args.size)
    small = synthetic_jsonl(args.workdir, args.size // 8)
    size_big, size_small = big.stat().st_size, small.stat().st_size
    results: dict = {"machine_before": machine(), "parallelism": args.parallelism}
    print(results["machine_before"])
    print(
        f"data {big.name}: {size_big / (1 << 20):.0f} MiB; {small.name}: "
        f"{size_small / (1 << 20):.0f} MiB; TOKENIZERS_PARALLELISM={args.parallelism}"
    )
    arms = [(arm, ROOT) for arm in ARMS]
    if args.baseline_tree is not None:
        arms.append(("baseline", args.baseline_tree.resolve()))
    runs: dict[str, list[dict]] = {name: [] for name, _ in arms}
    runs["count_file_small"] = []
    for k in range(args.repeats):  # interleaved: load drifts hit every arm alike
        for name, tree in arms:
            arm = "count_file" if name == "baseline" else name
            r = run_arm(arm, big, tokenizer, tree, args.parallelism)
            r["load"] = os.getloadavg()[0]
            runs[name].append(r)
            print(f"  run {k + 1} {name}: {r['seconds']:.1f} s, {r['rss_mib']:.0f} MiB", flush=True)
        runs["count_file_small"].append(
            run_arm("count_file", small, tokenizer, ROOT, args.parallelism)
        )
    records = {r["records"] for name, _ in arms if name != "baseline" for r in runs[name]}
    assert len(records) == 1, records  # every arm read the same records
    for name, _ in arms:
        results[name] = summary(runs[name], size_big)
    results["count_file_small"] = summary(runs["count_file_small"], size_small)
    geo, naive, fast = (results[a] for a in ARMS)
    results["ratio"] = geo["seconds"] / naive["seconds"]
    results["ratio_fast"] = geo["seconds"] / fast["seconds"]
    results["rss_growth"] = geo["rss_mib"] / results["count_file_small"]["rss_mib"]
    results["machine_after"] = machine()
    first, naive_run = runs["count_file"][0], runs["encode_batch"][0]
    print(
        f"{naive_run['records']:,} records, {naive_run['texts']:,} texts, {first['tokens']:,} tokens "
        f"({first['sid_tokens']:,} SID tokens); medians of {args.repeats} (min-max):"
    )
    for name, _ in arms:
        r = results[name]
        print(
            f"  {name:18} {r['seconds']:7.1f} s ({r['min_s']:.1f}-{r['max_s']:.1f}) "
            f"{r['mib_per_s']:6.1f} MiB/s  CPU {r['cpu_s']:.1f} s  peak RSS {r['rss_mib']:.0f} MiB"
        )
    print(
        f"ratio count_file / encode_batch {results['ratio']:.2f}x (target <= 1.5x); "
        f"/ encode_batch_fast {results['ratio_fast']:.2f}x"
    )
    print(
        f"peak RSS of count_file: {results['count_file_small']['rss_mib']:.0f} MiB at "
        f"{size_small / (1 << 20):.0f} MiB, {geo['rss_mib']:.0f} MiB at "
        f"{size_big / (1 << 20):.0f} MiB (x{results['rss_growth']:.2f})"
    )
    print(results["machine_after"])
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
