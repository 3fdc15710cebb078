"""Ranking the catalog for a batch of prompts: trie-constrained beam search, and exact
full-catalog scoring. Both score an item by the sum of the log-probabilities (over
the full vocabulary) of its SID tokens, as transformers' beam search does.

Beam search, per batch of users, with no Python work per beam or per token:
1. prefill: the prompts run once, left-padded; their key/value cache is then
   repeated for the beams (transformers' ``generate`` instead runs every prompt
   ``num_beams`` times);
2. per level, one :func:`advance` of the :class:`Beams`: log-softmax of the beams'
   next-token logits, the level's columns, the trie's mask for each beam's node,
   top-``beams`` over (beam x code), one gather for the new nodes; then one
   ``reorder_cache`` for the cache. The first level is the same step from one live
   beam at the root.

Exact scoring: after the prefill, every distinct SID prefix of length L - 1 runs
as one short continuation sharing the prompt's cache (chunked), which gives the
log-probabilities of all levels for all items at once.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from gti.evaluate.trie import SidTrie
from gti.models.kv_cache import cache_kwarg, cache_of

NEG_INF = float("-inf")


@dataclass
class Ranking:
    """Ranked items per prompt, best first."""

    items: torch.Tensor  # (N, M) long leaf indices into trie.item_ids; -1 = no item
    scores: torch.Tensor  # (N, M) float, sum of SID token log-probs; -inf = no item


def log_softmax(logits: torch.Tensor) -> torch.Tensor:
    """Log-probabilities over the last axis, in at least float32 (a float64 model stays
    float64: the equivalence tests rely on it)."""
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    return torch.log_softmax(logits, dim=-1)


def left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) ids and (B, T) attention mask, padded on the left."""
    T = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), T), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), T), dtype=torch.long)
    for row, p in enumerate(prompts):
        ids[row, T - len(p) :] = torch.tensor(p, dtype=torch.long)
        mask[row, T - len(p) :] = 1
    return ids, mask


@dataclass
class Prefill:
    logprobs: torch.Tensor  # (B, V) next-token log-probs after each prompt (>= float32)
    cache: object  # the prompts' key/value cache, batch B
    mask: torch.Tensor  # (B, T) attention mask of the prompts
    last_pos: torch.Tensor  # (B,) position id of each prompt's last token


def prefill(model: PreTrainedModel, prompts: list[list[int]], pad_id: int) -> Prefill:
    device = model.device
    ids, mask = left_pad(prompts, pad_id)
    ids, mask = ids.to(device), mask.to(device)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)  # as generate() does for left padding
    out = model(
        input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1
    )
    logprobs = log_softmax(out.logits[:, -1])  # (B, V)
    return Prefill(logprobs, cache_of(out), mask, pos[:, -1])


def _step(
    model: PreTrainedModel,
    tokens: torch.Tensor,
    mask: torch.Tensor,
    pos: torch.Tensor,
    cache: object,
) -> torch.Tensor:
    """Feed (R, S) tokens after the cached context; (R, S, V) log-probs (>= float32)."""
    out = model(
        input_ids=tokens,
        attention_mask=mask,
        position_ids=pos,
        use_cache=True,
        **{cache_kwarg(model): cache},
    )
    return log_softmax(out.logits)


@dataclass
class Beams:
    """The ``W`` best partial SIDs of each of ``B`` prompts after some levels."""

    scores: torch.Tensor  # (B, W) sum of the SID token log-probs so far; -inf = dead beam
    nodes: torch.Tensor  # (B, W) trie node reached (the depth's dead id for a dead beam)
    code: torch.Tensor  # (B, W) code chosen at the last level: the token to feed next
    parent: torch.Tensor  # (B, W) the beam each one extends

    @classmethod
    def at_root(cls, B: int, W: int, trie: SidTrie, device: torch.device) -> Beams:
        """One live beam per prompt at the root (score 0), the other W - 1 dead."""
        scores = torch.full((B, W), NEG_INF, device=device)
        scores[:, 0] = 0.0
        nodes = torch.full((B, W), trie.n_nodes[0], dtype=torch.long, device=device)
        nodes[:, 0] = 0
        zeros = torch.zeros((B, W), dtype=torch.long, device=device)
        return cls(scores, nodes, zeros, zeros)


def advance(beams: Beams, logprobs: torch.Tensor, trie: SidTrie, depth: int) -> Beams:
    """One level of trie-constrained beam search: each beam's allowed codes at ``depth``
    scored with ``logprobs`` (B*W, V), the best ``W`` of (beam x code) kept per prompt."""
    B, W = beams.scores.shape
    K = trie.level_tokens[depth].shape[0]
    cand = logprobs[:, trie.level_tokens[depth]]  # (B*W, K)
    cand = cand.masked_fill(~trie.allowed(depth, beams.nodes.reshape(-1)), NEG_INF)
    total = (beams.scores.reshape(-1, 1).to(cand.dtype) + cand).reshape(B, W * K)
    scores, flat = total.topk(W, dim=1)  # (B, W)
    parent, code = flat // K, flat % K
    nodes = trie.children[depth][beams.nodes.gather(1, parent), code]  # (B, W)
    return Beams(scores, nodes, code, parent)


@torch.no_grad()
def beam_search_batch(
    model: PreTrainedModel, prompts: list[list[int]], trie: SidTrie, *, beams: int, pad_id: int
) -> Ranking:
    """Top ``beams`` items per prompt by trie-constrained beam search, best first."""
    B, W, dev = len(prompts), beams, model.device
    pre = prefill(model, prompts, pad_id)
    state = advance(Beams.at_root(B, W, trie, dev), pre.logprobs.repeat_interleave(W, 0), trie, 0)
    cache = pre.cache
    cache.batch_repeat_interleave(W)  # type: ignore[attr-defined]  # (B*W, ...)
    mask = pre.mask.repeat_interleave(W, dim=0)  # (B*W, T)
    last_pos = pre.last_pos.repeat_interleave(W)  # (B*W,)
    offsets = torch.arange(B, device=dev)[:, None] * W  # (B, 1)
    for d in range(1, trie.depth):
        tokens = trie.level_tokens[d - 1][state.code].reshape(B * W, 1)
        mask = torch.cat([mask, mask.new_ones(B * W, 1)], dim=1)
        logp = _step(model, tokens, mask, (last_pos + d)[:, None], cache)[:, -1]  # (B*W, V)
        state = advance(state, logp, trie, d)
        beam_idx = (offsets + state.parent).reshape(-1)
        cache.reorder_cache(beam_idx)  # type: ignore[attr-defined]
        mask = mask[beam_idx]
    items = torch.where(torch.isinf(state.scores), -1, state.nodes)
    return Ranking(items.cpu(), state.scores.cpu())


@torch.no_grad()
def exact_scores_batch(
    model: PreTrainedModel,
    prompts: list[list[int]],
    trie: SidTrie,
    *,
    pad_id: int,
    chunk: int = 256,
) -> torch.Tensor:
    """(B, n_items) score of every item for every prompt (sum of its SID token log-probs)."""
    B, L, dev = len(prompts), trie.depth, model.device
    pre = prefill(model, prompts, pad_id)
    scores = pre.logprobs[:, trie.level_tokens[0]][:, trie.codes[:, 0]]  # (B, n_items)
    if L == 1:
        return scores.cpu()
    P = trie.n_nodes[L - 1]
    prefix_tokens = torch.stack(
        [trie.level_tokens[j][trie.prefix_codes[L - 1][:, j]] for j in range(L - 1)], dim=1
    )  # (P, L-1)
    K = max(t.shape[0] for t in trie.level_tokens[1:])
    # table[b, p, j, k]: log-prob of code k at level j + 1 after prompt b and prefix p.
    table = torch.full((B, P, L - 1, K), NEG_INF, dtype=scores.dtype, device=dev)
    pairs = torch.cartesian_prod(torch.arange(B, device=dev), torch.arange(P, device=dev))
    for rows in pairs.split(chunk):
        user, prefix = rows[:, 0], rows[:, 1]
        cache = copy.deepcopy(pre.cache)
        cache.reorder_cache(user)  # type: ignore[attr-defined]
        mask = torch.cat([pre.mask[user], pre.mask.new_ones(len(rows), L - 1)], dim=1)
        pos = pre.last_pos[user][:, None] + torch.arange(1, L, device=dev)[None, :]
        logp = _step(model, prefix_tokens[prefix], mask, pos, cache)  # (R, L-1, V)
        for j in range(L - 1):
            level = trie.level_tokens[j + 1]
            table[user, prefix, j, : level.shape[0]] = logp[:, j, level]
    node = trie.node_of[L - 1]  # (n_items,)
    for j in range(L - 1):
        scores = scores + table[:, node, j, trie.codes[:, j + 1]]
    return scores.cpu()


def rank_exact(scores: torch.Tensor, top: int) -> Ranking:
    """The best ``top`` items of (N, n_items) scores; padded with -1 / -inf past the catalog."""
    values, items = scores.topk(min(top, scores.shape[1]), dim=1)
    if items.shape[1] < top:
        pad = top - items.shape[1]
        items = torch.cat([items, items.new_full((len(items), pad), -1)], dim=1)
        values = torch.cat([values, values.new_full((len(values), pad), NEG_INF)], dim=1)
    return Ranking(items, values)


def batched(n: int, size: int) -> Iterator[slice]:
    for start in range(0, n, size):
        yield slice(start, min(n, start + size))


def rank_items(
    model: PreTrainedModel,
    prompts: list[list[int]],
    trie: SidTrie,
    *,
    beams: int,
    pad_id: int,
    batch_size: int = 8,
    exact: bool = False,
    on_batch: Callable[[int], None] | None = None,
) -> Ranking:
    """Top-``beams`` items for every prompt, by beam search or (``exact``) by scoring
    the whole catalog; batches of ``batch_size`` prompts."""
    model.eval()
    trie = trie.to(model.device)
    parts = []
    for sl in batched(len(prompts), batch_size):
        if exact:
            part = rank_exact(exact_scores_batch(model, prompts[sl], trie, pad_id=pad_id), beams)
        else:
            part = beam_search_batch(model, prompts[sl], trie, beams=beams, pad_id=pad_id)
        parts.append(part)
        if on_batch is not None:
            on_batch(sl.stop - sl.start)
    return Ranking(torch.cat([p.items for p in parts]), torch.cat([p.scores for p in parts]))
