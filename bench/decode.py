"""Decoding throughput: gti's trie beam search against transformers' constrained beam search.

Both rank the catalog for the same users with the same beam size, over the same
prefix trie of valid SIDs:

  gti            gti.evaluate.decode.beam_search_batch: one prefill per user, the
                 cache repeated for the beams, per level one masked top-k over
                 (beam x code) on tensors
  transformers   model.generate(num_beams=W, num_return_sequences=W,
                 prefix_allowed_tokens_fn=<walk of a nested-dict trie>)

The two must return the same ranked lists (asserted: same items in the same order,
except where two scores tie within 1e-4, and the same scores). Each batch runs both
back to back, so a busy machine slows both alike; users/s excludes one warm-up batch.

    .venv/bin/python bench/decode.py                          # tiny model, synthetic catalog
    .venv/bin/python bench/decode.py --checkpoint runs/ml100k/random/init --users 32
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from geodiag.io.vocabulary.sidecar import load
from gti.data.tasks import load_task_data
from gti.evaluate.decode import beam_search_batch, left_pad
from gti.evaluate.trie import SidTrie
from gti.prompts import prompt_ids

TIE = 1e-4


def tiny_checkpoint(root: Path) -> Path:
    """Synthetic catalog, tiny Llama, bag-of-words SIDs, random init: offline, seconds."""
    from gti.data.synthetic import make_synthetic
    from gti.init.config import InitConfig
    from gti.init.run import run_init
    from gti.models.tiny import save_tiny
    from gti.semantic_ids.build import build_sids
    from gti.semantic_ids.config import RQVAEConfig, SidsConfig

    model_dir = save_tiny(root / "model", make_synthetic().catalog.texts, seed=0)
    rq = RQVAEConfig(codebook_size=16, epochs=5, hidden_dims=(64,), latent_dim=16, batch_size=64)
    build_sids(
        SidsConfig(
            data="synthetic",
            model=str(model_dir),
            out=root / "sids",
            encoder="bow",
            rqvae=rq,
            progress=False,
            cache_dir=root / "cache",
        )
    )
    return run_init(InitConfig(sids=root / "sids", out=root / "init", strategy="random"))


def hf_allowed_fn(trie: SidTrie, prompt_len: int):
    """transformers' callback: the allowed next tokens after the generated prefix."""
    nested: dict = {}
    for tokens in trie.item_tokens().tolist():
        node = nested
        for t in tokens:
            node = node.setdefault(t, {})

    def allowed(_batch_id: int, seq: torch.Tensor) -> list[int]:
        node = nested
        for t in seq[prompt_len:].tolist():
            node = node[t]
        return list(node)

    return allowed


def hf_rank(model, prompts, trie, beams, pad_id, item_of):
    ids, mask = left_pad(prompts, pad_id)
    L = trie.depth
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        num_beams=beams,
        num_return_sequences=beams,
        max_new_tokens=L,
        prefix_allowed_tokens_fn=hf_allowed_fn(trie, ids.shape[1]),
        do_sample=False,
        return_dict_in_generate=True,
        output_scores=True,
        pad_token_id=pad_id,
        eos_token_id=None,
        length_penalty=1.0,
    )
    seqs = out.sequences[:, ids.shape[1] :].reshape(len(prompts), beams, L).tolist()
    items = torch.tensor([[item_of[tuple(s)] for s in row] for row in seqs])
    return items, out.sequences_scores.reshape(len(prompts), beams) * L  # undo length norm


def same_ranking(a_items, a_scores, b_items, b_scores) -> tuple[bool, int]:
    """Equal up to reordering inside groups of scores tied within TIE; (ok, n_swaps)."""
    if not torch.allclose(a_scores, b_scores, atol=TIE, rtol=0):
        return False, 0
    swaps = 0
    for ra, rb, sa in zip(a_items.tolist(), b_items.tolist(), a_scores.tolist(), strict=True):
        for k, (x, y) in enumerate(zip(ra, rb, strict=True)):
            if x != y:
                swaps += 1
                tied = [j for j in range(len(sa)) if abs(sa[j] - sa[k]) < TIE]
                if sorted(ra[j] for j in tied) != sorted(rb[j] for j in tied):
                    return False, swaps
    return True, swaps


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--checkpoint", type=Path, help="a gti checkpoint (default: a tiny one, built now)"
    )
    ap.add_argument("--users", type=int, default=64)
    ap.add_argument("--beams", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=8, help="users per batch, both methods")
    ap.add_argument("--k-core", type=int, default=None, help="default: 5 (1 for the tiny world)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory(prefix="gti-bench-decode-") as tmp:
        ckpt = args.checkpoint or tiny_checkpoint(Path(tmp))
        k_core = args.k_core or (5 if args.checkpoint else 1)
        sids = load(ckpt)
        tok = AutoTokenizer.from_pretrained(ckpt)
        model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
        task = load_task_data(sids, str(sids.provenance["data"]), k_core_min=k_core, max_history=20)
        trie = SidTrie.build(sids)
        item_of = {tuple(t): i for i, t in enumerate(trie.item_tokens().tolist())}
        users = task.splits.test[: args.users]
        prompts = [prompt_ids(tok, [task.sid_of[i] for i in e.history]) for e in users]
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        B, W = args.batch_size, args.beams

        times = {"gti": 0.0, "transformers": 0.0}
        n_timed, swaps = 0, 0
        batches = [prompts[i : i + B] for i in range(0, len(prompts), B)]
        for b, batch in enumerate(batches):
            t0 = time.perf_counter()
            ours = beam_search_batch(model, batch, trie, beams=W, pad_id=pad)
            t1 = time.perf_counter()
            with torch.no_grad():
                hf_items, hf_scores = hf_rank(model, batch, trie, W, pad, item_of)
            t2 = time.perf_counter()
            ok, n = same_ranking(ours.items, ours.scores, hf_items, hf_scores)
            assert ok, f"batch {b}: ranked lists differ beyond ties"
            swaps += n
            if b > 0 or len(batches) == 1:  # the first batch warms up both
                times["gti"] += t1 - t0
                times["transformers"] += t2 - t1
                n_timed += len(batch)
            print(
                f"batch {b + 1}/{len(batches)}: gti {t1 - t0:.2f} s, transformers {t2 - t1:.2f} s",
                flush=True,
            )

    result = {
        "checkpoint": str(args.checkpoint or "tiny (synthetic, built by the bench)"),
        "model_params": sum(p.numel() for p in model.parameters()),
        "n_items": trie.n_items,
        "sid_levels": trie.depth,
        "users_timed": n_timed,
        "beams": W,
        "batch_size": B,
        "mean_prompt_tokens": sum(map(len, prompts)) / len(prompts),
        "threads": torch.get_num_threads(),
        "users_per_s": {k: n_timed / v for k, v in times.items()},
        "ranked_lists_match": True,
        "tie_swaps": swaps,
    }
    result["ratio"] = result["users_per_s"]["gti"] / result["users_per_s"]["transformers"]
    print(json.dumps(result, indent=1))
    print(f"gti / transformers users/s: {result['ratio']:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
