"""Grounding throughput: the fast route against the naive one, and what each part buys.

One run on SmolLM2-135M (the converted cached folder) over MovieLens-100k pairs.
Every route trains on the same batches (forward, backward, AdamW step); examples/s
is measured after one warm-up step. Routes, each adding one part of the fast route:

  naive            full embedding trainable behind a gradient mask, the full LM head
                   over every position, AdamW over all V rows
  +new-rows        E_new (n_new, d) the only parameter and optimizer state; hidden
                   states from the decoder, every position projected
  +answer-logits   only the answer positions projected
  +prefix-cache    the frozen prefix run once without gradient, KV cache reused
  +shared-prefix   the prefix every example shares (a chat template's system turn) run
                   once per run
  +row-groups      a batch mixing the directions cut in two groups by prefix length,
                   each padded to its own widths (= the fast route of gti init)

    .venv/bin/python bench/grounding.py [--sids runs/ml100k/sids] [--batch-size 16] [--steps 4]

Without --sids the SIDs are random codes (3 x 256) over the catalog: throughput
does not depend on which item gets which code, only on their token counts.

A framework's own index (the drop-in route, gti.dropin): --index FILE --items FILE
(e.g. the LC-Rec-format fixture: python tests/gti/dropin/lcrec_world.py /tmp/lcrec),
its tokens added as gti init --items adds them. Route naive-all (only with --routes):
every parameter requires grad behind a gradient mask (the issue's naive route; naive
trains the embedding alone, so the layers' weight gradients are skipped). --model qwen2-0.5b-random builds a
Qwen2-0.5B-shaped model with random weights (no hub) and a word-level tokenizer over
the item texts; --routes picks routes (run in the order given), --memory prints the
peak RSS after each (so put the lighter route first).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import time
from pathlib import Path

import numpy as np
import torch
from _naive_grounding import make_naive_trainable, naive_loss
from mfu import Shape, bf16_supported, matmul_peak

from geodiag.io.vocabulary.sidecar import Level, SemanticIds, load
from gti.data.sources import load_dataset
from gti.init import InitContext
from gti.init.config import GroundingConfig
from gti.init.grounding import (
    FrozenPrefix,
    NewRows,
    SharedPrefix,
    StepLoss,
    answer_loss,
    answer_tokens,
    batch_loss,
    fast_loss,
    freeze,
    frozen_prefix,
    suffix_hidden,
)
from gti.init.pairs import PairStream
from gti.init.run import apply_row_init
from gti.models.backbone import resolve_backbone
from gti.prompts import sid_strings
from gti.training import make_optimizer
from gti.vocab import add_new_tokens, extend_vocabulary

ROUTES = ("naive", "+new-rows", "+answer-logits", "+prefix-cache", "+shared-prefix", "+row-groups")


def random_sids(
    item_ids: list[str], levels: int = 3, size: int = 256, seed: int = 0
) -> SemanticIds:
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, size, size=(len(item_ids), levels))
    return SemanticIds(
        base_vocab_size=None,
        levels=[Level(chr(ord("a") + i), size) for i in range(levels)],
        items={i: [int(c) for c in row] for i, row in zip(item_ids, codes, strict=True)},
    )


def shared_prefix(model, stream: PairStream) -> SharedPrefix | None:
    """The run-wide prefix cache, as gti init builds it (None: the renderings share no
    prefix, e.g. a tokenizer without a chat template)."""
    prefix = stream.common_prefix()
    return SharedPrefix(model, prefix) if prefix else None


def partial_loss(model, rows: NewRows, batch, route: str) -> StepLoss:
    """fast_loss's parts with the later ones switched off: no frozen prefix before
    +prefix-cache, and before +answer-logits every position projected onto the
    vocabulary (as a full LM head does) before the answers are picked."""
    device = rows.ids.device
    if route == "+prefix-cache":
        prefix = frozen_prefix(model, batch, device, None)
    else:
        prefix = FrozenPrefix.none(batch, rows.inp.shape[1], device)
    hidden = suffix_hidden(model, rows, batch, prefix)  # (B, W, d)
    answers = answer_tokens(batch, prefix)
    if route == "+new-rows":
        B, W, _ = hidden.shape
        logits = rows.project(model, hidden.reshape(B * W, -1)).view(B, W, -1)
        return answer_loss(logits[answers.row, answers.col], answers)
    return answer_loss(rows.project(model, hidden[answers.row, answers.col]), answers)


# The naive route, as a framework that "freezes" by masking does it: every
# parameter requires grad (weight gradients of every layer computed), a mask zeroes all
# but the new rows, AdamW over all of them.
NAIVE_ALL = "naive-all"


def every_parameter_masked(model, embedding: list[torch.nn.Parameter]) -> list:
    """Every parameter trainable; those not in ``embedding`` (already masked to the new
    rows) get their whole gradient zeroed."""
    masked = {id(p) for p in embedding}
    for p in model.parameters():
        if id(p) not in masked:
            p.requires_grad_(True)
            p.register_hook(torch.zeros_like)
    return list(model.parameters())


def time_route(
    route: str, model, ext, stream: PairStream, steps: int, lr: float
) -> tuple[float, float, torch.Tensor]:
    """Wall and CPU seconds (the process's, all threads) per step over ``steps`` steps
    (after one warm-up step), and the gradient on the new rows of the first batch
    (n_new, d), to compare routes. On a shared machine the CPU seconds vary less than
    the wall (run with OMP_WAIT_POLICY=PASSIVE, so that waiting threads do not spin)."""
    if route in ("naive", NAIVE_ALL):
        model = copy.deepcopy(model)
        params = make_naive_trainable(model, ext)
        if route == NAIVE_ALL:
            params = every_parameter_masked(model, params)
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)

        def loss_of(batch):
            return naive_loss(model, batch)

        def new_grad():
            return model.get_input_embeddings().weight.grad[ext.ids_tensor()].clone()
    else:
        rows = NewRows(model, ext)
        opt = make_optimizer(rows.parameters(), GroundingConfig(lr=lr))
        shared = shared_prefix(model, stream)

        def loss_of(batch):
            if route == "+row-groups":  # the fast route of gti init, as it trains
                return fast_loss(model, rows, batch, shared=shared).loss
            if route == "+shared-prefix":
                return batch_loss(model, rows, batch, shared=shared).loss
            return partial_loss(model, rows, batch, route).loss

        def new_grad():
            return rows.inp.grad.clone()

    batches = [stream.batch(s) for s in range(steps + 1)]
    t0 = c0 = 0.0
    for i, batch in enumerate(batches):
        if i == 1:
            t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        loss_of(batch).backward()
        if i == 0:
            grad = new_grad()
        opt.step()
    return (time.perf_counter() - t0) / steps, (time.process_time() - c0) / steps, grad


def step_flops(shape: Shape, batch, shared: int) -> float:
    """FLOPs of one fast-route step on ``batch`` (bench/mfu.py's counting): the frozen
    prefix forward only; the suffix forward plus an activation-only backward (no weight
    trains: 1x forward); the answer positions' head, forward and backward (2x)."""
    split = torch.minimum(batch.first_new, batch.answer_start).double()  # (B,)
    length = batch.lengths.double()
    prefix = (split - shared).clamp(min=0)
    suffix = length - 1 - split
    answers = length - batch.answer_start.double()
    flops = shape.forward_flops(float(prefix.sum()), float(((shared + split) / 2).mean()))
    flops += 2 * shape.forward_flops(float(suffix.sum()), float(((split + length) / 2).mean()))
    flops += 2 * shape.head_flops(float(answers.sum()))
    return flops


def fast_seconds(model, ext, stream: PairStream, steps: int, bf16: bool) -> float:
    """Seconds per fast-route step (optimizer included), after one warm-up step."""
    rows = NewRows(model, ext)
    opt = make_optimizer(rows.parameters(), GroundingConfig(lr=1e-3))
    shared = shared_prefix(model, stream)
    t0 = 0.0
    for i in range(steps + 1):
        if i == 1:
            t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = fast_loss(model, rows, stream.batch(i), shared=shared)
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        opt.step()
    return (time.perf_counter() - t0) / steps


def bf16_check(model, ext, stream: PairStream) -> dict[str, float]:
    """bf16 autocast against float32 on the same batch: loss and new-row gradient."""
    shared = shared_prefix(model, stream)
    out = {}
    for bf16 in (False, True):
        rows = NewRows(model, ext)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            step = fast_loss(model, rows, stream.batch(0), shared=shared)
        step.loss.backward()
        out[bf16] = (float(step.loss), rows.inp.grad.clone())
    (l32, g32), (l16, g16) = out[False], out[True]
    cos = float(torch.nn.functional.cosine_similarity(g32.flatten(), g16.flatten(), dim=0))
    return {
        "loss_fp32": l32,
        "loss_bf16": l16,
        "loss_rel_diff": abs(l16 - l32) / abs(l32),
        "grad_rel_diff": float((g16 - g32).norm() / g32.norm()),
        "grad_cosine": cos,
    }


def mfu_report(model, ext, stream: PairStream, steps: int) -> dict[str, object]:
    """Achieved FLOP/s of the fast route against the measured matmul peak, per dtype."""
    shape = Shape.of(model)
    shared = len(stream.common_prefix())
    flops = sum(step_flops(shape, stream.batch(i), shared) for i in range(1, steps + 1)) / steps
    result: dict[str, object] = {"flops_per_step": flops}
    dtypes = [("fp32", torch.float32, False)]
    if bf16_supported():
        dtypes.append(("bf16", torch.bfloat16, True))
    for name, dtype, bf16 in dtypes:
        peak = matmul_peak(dtype)
        seconds = fast_seconds(model, ext, stream, steps, bf16)
        achieved = flops / seconds
        result[name] = {
            "peak_flops": peak,
            "achieved_flops": achieved,
            "mfu": achieved / peak,
            "seconds_per_step": seconds,
        }
        print(
            f"  {name}: {achieved / 1e9:6.1f} GFLOP/s achieved, matmul peak {peak / 1e9:6.1f} "
            f"GFLOP/s -> MFU {achieved / peak:.1%} ({seconds:.2f} s/step)"
        )
    if bf16_supported():
        result["bf16_check"] = bf16_check(model, ext, stream)
        print(f"  bf16 vs fp32, first batch: {result['bf16_check']}")
    return result


QWEN2_RANDOM = "qwen2-0.5b-random"


def qwen2_random(texts: list[str]):
    """Qwen2-0.5B's shape (24 layers, d 896, 14 heads / 2 KV heads, MLP 4864, 151,936
    rows, tied) with random weights, and a word-level tokenizer over ``texts``: the
    embedding's rows past the tokenizer are padding rows, as Qwen's are."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from gti.models.tiny import build_tiny_tokenizer
    from gti.prompts import SID_TO_TEXT, TEXT_TO_SID

    tok = build_tiny_tokenizer(texts + list(TEXT_TO_SID) + list(SID_TO_TEXT))
    config = Qwen2Config(
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config).eval(), tok


def index_setup(args):
    """(model, tokenizer, extension, texts, SID strings) for a framework's index."""
    from gti.dropin.index import read_index
    from gti.dropin.items import item_texts

    index = read_index(args.index)
    all_texts = item_texts(args.items)
    items = [i for i in index.items if all_texts.get(i)]
    texts = [all_texts[i] for i in items]
    if args.model == QWEN2_RANDOM:
        model, tok = qwen2_random(texts)
    else:
        model, tok = resolve_backbone(args.model, cache_dir=args.cache_dir).load()
    ext = add_new_tokens(model, tok, index.tokens, as_strings=True)
    return model, tok, ext, texts, [index.sid_string(i) for i in items]


def peak_rss_gb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sids", type=Path, default=None)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--data", default="movielens-100k")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--steps", type=int, default=4, help="timed steps per route")
    ap.add_argument("--cache-dir", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    ap.add_argument(
        "--mfu-only", action="store_true", help="only the fast route's FLOP/s against the peak"
    )
    ap.add_argument("--index", type=Path, default=None, help="a framework's SID map (drop-in)")
    ap.add_argument("--items", type=Path, default=None, help="its item texts (with --index)")
    ap.add_argument("--routes", default=",".join(ROUTES), help="routes to time, in this order")
    ap.add_argument("--skip-mfu", action="store_true", help="no FLOP/s measurement")
    ap.add_argument("--memory", action="store_true", help="peak RSS after each route")
    args = ap.parse_args()

    if args.index is not None:
        model, tok, ext, texts, sid_texts = index_setup(args)
    else:
        catalog = load_dataset(args.data, args.cache_dir).catalog
        sids = load(args.sids) if args.sids else random_sids(catalog.item_ids)
        items = list(sids.items)
        texts = [catalog.items[catalog.index(i)].text for i in items]
        model, tok = resolve_backbone(args.model, cache_dir=args.cache_dir).load()
        ext = extend_vocabulary(model, tok, sids)
        sid_texts = sid_strings(sids, items)
    apply_row_init(model, ext, "mean", torch.Generator().manual_seed(0), InitContext())
    freeze(model)
    slot = NewRows(model, ext).slot
    stream = PairStream(tok, texts, sid_texts, slot, batch_size=args.batch_size, seed=0)

    b0 = stream.batch(0)
    load_avg = os.getloadavg()[0]  # other processes on the machine skew examples/s
    print(
        f"model {args.model}: {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M params, "
        f"V={model.get_input_embeddings().weight.shape[0]}, n_new={ext.n_new}; batch {args.batch_size}, "
        f"mean length {b0.lengths.float().mean():.0f} tokens, mean answer start "
        f"{b0.answer_start.float().mean():.0f}, mean first new token {b0.first_new.float().mean():.0f}, "
        f"shared prefix {len(stream.common_prefix())} tokens; "
        f"threads {torch.get_num_threads()}, load average {load_avg:.1f}"
    )
    mfu: dict[str, object] = {}
    if not args.skip_mfu:
        print("model FLOPs utilisation of the fast route (FLOPs counted as in bench/mfu.py):")
        mfu = mfu_report(model, ext, stream, args.steps)
    if args.mfu_only:
        if args.json:
            args.json.write_text(json.dumps({"mfu": mfu, "load_average_at_start": load_avg}))
        return
    routes = args.routes.split(",")
    # A route named twice is timed twice and keeps its faster run (the first route of a
    # process also pays for every new batch shape it meets; the machine's load varies).
    seconds: dict[str, float] = {}
    cpu: dict[str, float] = {}
    grads, rss, runs = {}, {}, []
    print(f"  peak RSS before the routes: {peak_rss_gb():.2f} GiB" if args.memory else "", end="")
    for route in routes:
        took, took_cpu, grads[route] = time_route(route, model, ext, stream, args.steps, lr=1e-3)
        runs.append((route, args.batch_size / took, took_cpu, os.getloadavg()[0]))
        seconds[route] = min(took, seconds.get(route, took))
        cpu[route] = min(took_cpu, cpu.get(route, took_cpu))
        rss[route] = peak_rss_gb()
        ref = grads[routes[0]]
        rel = (grads[route] - ref).abs().max() / ref.abs().max()
        print(
            f"\n  {route:15s} {args.batch_size / took:7.2f} examples/s, {took_cpu:6.1f} CPU s/step"
            f" (load {runs[-1][3]:.1f})"
            f"  (first-batch gradient vs {routes[0]}: max rel. diff {rel:.1e})"
            + (f"; peak RSS so far {rss[route]:.2f} GiB" if args.memory else ""),
            end="",
        )
    print()
    fastest = ROUTES[-1] if ROUTES[-1] in seconds else routes[-1]
    speedup = seconds["naive"] / seconds[fastest] if "naive" in seconds else float("nan")
    print(f"fast / naive: {speedup:.2f}x examples/s")
    for slow in ("naive", NAIVE_ALL):
        if slow in seconds:
            print(
                f"fast / {slow}: {seconds[slow] / seconds[fastest]:.2f}x examples/s (best runs), "
                f"{cpu[slow] / cpu[fastest]:.2f}x in CPU seconds per step"
            )
    if all(r in seconds for r in ROUTES):
        print("contribution of each part (ratio to the route before it: examples/s, CPU s):")
        for prev, route in zip(ROUTES, ROUTES[1:], strict=False):
            print(
                f"  {route:15s} x{seconds[prev] / seconds[route]:.2f}, x{cpu[prev] / cpu[route]:.2f}"
            )
    if args.json:
        result = {
            "examples_per_s": {r: args.batch_size / s for r, s in seconds.items()},
            "cpu_seconds_per_step": cpu,
            "runs": [
                {"route": r, "examples_per_s": e, "cpu_seconds_per_step": c, "load": w}
                for r, e, c, w in runs
            ],
            "speedup": speedup,
            "batch_size": args.batch_size,
            "steps": args.steps,
            "model": args.model,
            "threads": torch.get_num_threads(),
            "load_average_at_start": load_avg,
            "mfu": mfu,
            "peak_rss_gib_after": rss if args.memory else None,
            "index": None if args.index is None else str(args.index),
        }
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
