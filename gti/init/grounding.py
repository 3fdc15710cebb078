"""GTI grounding, the fast route: only the new rows carry gradient and optimizer state.

The model stays frozen (every transformer weight and every original row); the
trainable tensors are ``NewRows.inp`` (n_new, d) and, for an untied head,
``NewRows.out`` (n_new, d). Three things make a step cheap, each exact:

1. Frozen prefix: the tokens before a sequence's first new token depend on no
   trainable tensor. They run once under ``no_grad`` and hand their key/value
   cache to the rest of the sequence, which alone is back-propagated. In the
   text -> SID direction that is the whole prompt; the suffix is the SID itself.
   The part every example shares (the chat template's system turn and user
   header, ``SharedPrefix``) runs once per training run, not once per batch.
2. Answer-only logits: hidden states come from the decoder (no LM head); only the
   answer positions are projected, onto the frozen head with the new rows swapped in.
3. Optimizer state for the new rows only (AdamW on (n_new, d), not (V, d)).
4. Row groups: a batch mixing the two directions (text -> SID: the new tokens come last,
   the prefix is nearly the whole row; SID -> text: they come early) pads every row to
   the widest prefix and the widest suffix, which can cost more than no split at all.
   ``row_groups`` cuts the batch in two by split position when that is cheaper, and each
   group runs parts 1-3 at its own widths; the loss is the mean over all answer tokens
   either way.

Activation checkpointing (``--gradient-checkpointing``, :func:`layer_checkpointing`) trades
part 1 away: a checkpointed layer runs its forward again in the backward, and a suffix run
after the prefix's cache would write its keys and values into that cache a second time.
With it on, every row runs whole (``FrozenPrefix.none``, no cache: the same loss and
gradients, more positions with gradient) and only the layers' boundaries are kept.

Each part is a named function (``frozen_prefix``, ``suffix_hidden``, ``answer_tokens``
+ ``NewRows.project``, ``row_groups``); ``batch_loss`` chains parts 1-3 over one group,
``fast_loss`` over each group. ``bench/grounding.py`` chains them differently to measure
what each part buys; its ``_naive_grounding.py`` is the reference route these are checked
against (same gradients, ``tests/gti/init``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel

from gti.init.pairs import Batch
from gti.init.parallel import on_any_process
from gti.models.kv_cache import cache_kwarg, cache_of
from gti.vocab import VocabExtension


def frozen_layer(module: nn.Module) -> nn.Module:
    """``module``, or the frozen layer a PEFT tuner layer wraps (``--vehicle peft``,
    :mod:`gti.init.peft_rows`): the wrapper splices its trainable rows into a (V, d) copy
    of the matrix at every call, where the fast path reads the frozen rows and takes the
    new ones from :class:`NewRows`."""
    base = getattr(module, "get_base_layer", None)
    return base() if base is not None else module


def input_embedding(model: PreTrainedModel) -> nn.Module:
    return frozen_layer(model.get_input_embeddings())


def output_head(model: PreTrainedModel) -> nn.Module:
    return frozen_layer(model.get_output_embeddings())


class NewRows(nn.Module):
    """The trainable new rows, and how they enter the frozen model."""

    def __init__(self, model: PreTrainedModel, ext: VocabExtension) -> None:
        super().__init__()
        embed = input_embedding(model)
        ids = ext.ids_tensor(embed.weight.device)  # (n_new,)
        slot = torch.full((embed.weight.shape[0],), -1, dtype=torch.long, device=ids.device)
        slot[ids] = torch.arange(len(ids), device=ids.device)
        self.register_buffer("ids", ids)
        self.register_buffer("slot", slot)  # (V,): row of E_new for a new id, -1 otherwise
        # Ids [0, n_old) are the original vocabulary; padding rows past the tokenizer are not.
        self.n_old = ext.base_vocab_size
        self.inp = nn.Parameter(embed.weight.detach()[ids].clone())  # (n_new, d)
        head = output_head(model)
        self.out = None if ext.tied else nn.Parameter(head.weight.detach()[ids].clone())
        # Gemma-style embeddings scale their output; new rows must get the same scale.
        self.embed_scale = getattr(embed, "embed_scale", None)

    @property
    def output_rows(self) -> torch.Tensor:
        return self.inp if self.out is None else self.out

    def embed(self, model: PreTrainedModel, input_ids: torch.Tensor) -> torch.Tensor:
        """Input embeddings, (B, T) -> (B, T, d), with the new rows taken from ``inp``."""
        base = input_embedding(model)(input_ids)  # frozen: no grad
        slot = self.slot[input_ids]  # (B, T)
        new = self.inp[slot.clamp(min=0)]  # (B, T, d)
        if self.embed_scale is not None:
            new = new * self.embed_scale
        return torch.where((slot >= 0)[..., None], new.to(base.dtype), base)

    def project(self, model: PreTrainedModel, hidden: torch.Tensor) -> torch.Tensor:
        """Logits (N, V) for hidden states (N, d): frozen head, new columns from the rows."""
        head = output_head(model)
        logits = hidden @ head.weight.detach().T  # (N, V)
        new = hidden @ self.output_rows.T  # (N, n_new)
        logits = logits.index_copy(1, self.ids, new)
        if getattr(head, "bias", None) is not None:
            logits = logits + head.bias.detach()
        return logits

    @torch.no_grad()
    def write_back(self, model: PreTrainedModel) -> None:
        """Copy the trained rows into the model's weights (for saving)."""
        model.get_input_embeddings().weight[self.ids] = self.inp.detach()
        if self.out is not None:
            model.get_output_embeddings().weight[self.ids] = self.out.detach()


@dataclass
class StepLoss:
    loss: torch.Tensor  # scalar, mean over all answer tokens of the batch
    token_losses: torch.Tensor  # (N,) detached, one per answer token
    token_direction: torch.Tensor  # (N,) direction of each answer token's example


def freeze(model: PreTrainedModel) -> None:
    """No parameter of the model trains; eval mode (no dropout) for exact gradients."""
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)


# Only the new rows take gradients, so the checkpoint needs no input that requires grad
# (the reentrant variant's condition); non-reentrant also handles keyword inputs.
CHECKPOINT_KWARGS = {"use_reentrant": False}


def checkpointed_modules(model: PreTrainedModel) -> list[nn.Module]:
    """The modules transformers checkpoints (its layers; the decoder in transformers 4.x)."""
    return [m for m in model.modules() if getattr(m, "gradient_checkpointing", False) is True]


@contextmanager
def layer_checkpointing(model: PreTrainedModel, enabled: bool) -> Iterator[None]:
    """Activation checkpointing of the frozen model's layers while the block runs.

    transformers checkpoints a layer only in training mode; :func:`freeze` put the model in
    eval mode (no dropout). Only the checkpointed modules themselves are marked training,
    their submodules (attention, dropout) stay in eval, so the numbers are eval mode's."""
    if not enabled:
        yield
        return
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.25
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=CHECKPOINT_KWARGS)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=CHECKPOINT_KWARGS)
    layers = checkpointed_modules(model)
    try:
        for m in layers:
            m.training = True
        yield
    finally:
        for m in layers:
            m.training = False
        if hasattr(model, "activation_checkpointing_disable"):
            model.activation_checkpointing_disable()
        else:
            model.gradient_checkpointing_disable()


class SharedPrefix:
    """Key/value cache of the token prefix all examples start with, computed once.

    Exact because the model is frozen and the prefix holds no new token.
    """

    def __init__(self, model: PreTrainedModel, ids: list[int]) -> None:
        decoder = model.get_decoder()
        embed = input_embedding(model)
        device = embed.weight.device
        self.ids = torch.tensor(ids, dtype=torch.long, device=device)  # (C,)
        with torch.no_grad():
            out = decoder(
                inputs_embeds=embed(self.ids[None]),
                attention_mask=torch.ones(1, len(ids), dtype=torch.bool, device=device),
                use_cache=True,
            )
        self._cache = cache_of(out)

    def __len__(self) -> int:
        return len(self.ids)

    def matches(self, input_ids: torch.Tensor) -> bool:
        """Whether every row of ``input_ids`` (B, T) starts with the shared prefix."""
        C = len(self.ids)
        return input_ids.shape[1] > C and bool((input_ids[:, :C] == self.ids).all())

    def cache_for(self, batch_size: int) -> object:
        cache = copy.deepcopy(self._cache)
        cache.batch_repeat_interleave(batch_size)  # type: ignore[attr-defined]
        return cache


@dataclass
class FrozenPrefix:
    """Part 1: tokens ``[0, split)`` of each row hold no new token, so nothing in them
    depends on a trainable tensor. They run once under ``no_grad``; their key/value
    cache is handed to the suffix. ``width`` = 0: no prefix (every row runs whole)."""

    split: torch.Tensor  # (B,) long, first suffix position of each row
    mask: torch.Tensor  # (B, width) bool, real prefix tokens (right-padded)
    hidden: torch.Tensor  # (B, width, d), constant; zeros for shared-cache tokens
    cache: dict[str, object]  # decoder kwargs that hand the prefix cache to the suffix

    @property
    def width(self) -> int:
        return self.mask.shape[1]

    @classmethod
    def none(cls, batch: Batch, dim: int, device: torch.device) -> FrozenPrefix:
        """No frozen prefix: the suffix is the whole sequence."""
        B = batch.input_ids.shape[0]
        return cls(
            split=torch.zeros(B, dtype=torch.long, device=device),
            mask=torch.zeros(B, 0, dtype=torch.bool, device=device),
            hidden=torch.zeros(B, 0, dim, device=device),
            cache={"use_cache": False},
        )


# A position run with gradient costs about this many times one run without (forward,
# then the backward of the activations: no weight of the frozen model takes a gradient).
GRAD_COST = 3


def split_costs(lengths: torch.Tensor, split: torch.Tensor) -> tuple[int, int]:
    """(split, whole): a row's work, padding included, in positions run without gradient
    (one with gradient counts ``GRAD_COST``), when rows of ``lengths`` run with their
    frozen prefixes (``split``) split off (the widest prefix, then the widest suffix with
    gradient) and when they run whole (``T - 1`` positions with gradient)."""
    whole = GRAD_COST * (int(lengths.max()) - 1)
    cut = int(split.max()) + GRAD_COST * int((lengths - 1 - split).max())
    return cut, whole


def prefix_pays(batch: Batch, split: torch.Tensor) -> bool:
    """Whether splitting off the frozen prefix saves work on this batch. Rows are padded
    to the widest prefix and then to the widest suffix: a batch mixing a row whose SID
    comes early (SID -> text) with one whose prompt is long (text -> SID) can cost more
    split (``width`` positions without gradient + ``S`` with, per row) than whole (``T - 1``
    with gradient). Either way the loss and gradients are the same."""
    cut, whole = split_costs(batch.lengths.to(split.device), split)
    return cut < whole


def row_splits(batch: Batch) -> torch.Tensor:
    """(B,) each row's frozen-prefix length: up to its first new token or its answer."""
    return torch.minimum(batch.first_new, batch.answer_start)


def padded_cost(lengths: torch.Tensor, split: torch.Tensor) -> int:
    """The work of running rows (``lengths``, ``split``) as one batch, in positions run
    without gradient (a position with gradient counts ``GRAD_COST``), padding included:
    the cheaper of split and whole, as ``frozen_prefix`` chooses."""
    cut, whole = split_costs(lengths, split)
    if int(split.min()) == 0:
        return len(lengths) * whole
    return len(lengths) * min(whole, cut)


# A second group runs every layer a second time on fewer rows; it is used only when it
# saves at least this share of the one-group work (a tiny model's step is per-call
# overhead more than positions).
GROUP_GAIN = 0.1


def row_groups(batch: Batch) -> list[torch.Tensor]:
    """Part 4: the batch's rows in one group, or in two cut at a split position (rows
    sorted by split) when the two groups' padded work is ``GROUP_GAIN`` below the one's."""
    lengths, split = batch.lengths, row_splits(batch)
    one = padded_cost(lengths, split)
    order = torch.argsort(split, stable=True)
    best, cut = one * (1 - GROUP_GAIN), 0
    for k in range(1, len(order)):
        lo, hi = order[:k], order[k:]
        cost = padded_cost(lengths[lo], split[lo]) + padded_cost(lengths[hi], split[hi])
        if cost < best:
            best, cut = cost, k
    if cut == 0:
        return [torch.arange(len(order))]
    return [order[:cut], order[cut:]]


def frozen_prefix(
    model: PreTrainedModel, batch: Batch, device: torch.device, shared: SharedPrefix | None
) -> FrozenPrefix:
    """Run each row's frozen prefix (up to its first new token or its answer) once,
    without gradient; the tokens every row shares come from ``shared``'s cache."""
    decoder = model.get_decoder()
    ids = batch.input_ids.to(device)
    embed = input_embedding(model)
    dim = embed.weight.shape[1]
    # A row whose first token is new has no prefix; then the whole batch runs without one.
    # Under activation checkpointing a layer's replay would write the cache twice.
    # Under --fsdp every process takes the same branch (gti.init.sharding).
    split = row_splits(batch).to(device)
    whole = int(split.min()) == 0 or not prefix_pays(batch, split) or checkpointed_modules(model)
    if on_any_process(model, bool(whole)):
        return FrozenPrefix.none(batch, dim, device)
    B, width = ids.shape[0], int(split.max())
    pos = torch.arange(width, device=device)
    # Shared tokens [0, n_shared) come from the run-wide cache. Every row's split lies
    # past them, so no loss term needs their hidden states.
    n_shared = len(shared) if shared is not None and shared.matches(ids) else 0
    n_shared = n_shared if int(split.min()) > n_shared else 0
    mask = pos[None, :] < split[:, None]  # (B, width), right-padded
    past = {cache_kwarg(decoder): shared.cache_for(B)} if n_shared else {}  # type: ignore[union-attr]
    with torch.no_grad():
        out = decoder(
            inputs_embeds=embed(ids[:, n_shared:width]),
            attention_mask=mask,  # (B, width): n_shared cached + the rest run now
            position_ids=pos[n_shared:].expand(B, -1),
            use_cache=True,
            **past,
        )
    hidden = out.last_hidden_state  # (B, width - n_shared, d)
    hidden = torch.cat([hidden.new_zeros(B, n_shared, hidden.shape[2]), hidden], dim=1)
    return FrozenPrefix(
        split, mask, hidden, {cache_kwarg(decoder): cache_of(out), "use_cache": True}
    )


def run_suffix(
    model: PreTrainedModel,
    rows: NewRows,
    ids: torch.Tensor,
    ends: torch.Tensor,
    prefix: FrozenPrefix,
    *,
    layer: int = -1,
) -> torch.Tensor:
    """Hidden states of tokens ``[split, ends)`` of each row of ``ids`` (B, T), run after
    the prefix's cache, with gradient into ``rows``: (B, S, d), column ``j`` of row ``b``
    holding position ``split[b] + j`` (columns past a row's end are padding).

    ``layer``: which of the decoder's hidden states, as ``output_hidden_states`` numbers
    them (1..L: after decoder layer k, L after the final norm); -1 is L."""
    device = rows.ids.device
    T = ids.shape[1]
    S = int((ends - prefix.split).max())
    suf_pos = prefix.split[:, None] + torch.arange(S, device=device)[None, :]  # (B, S) absolute
    suf_valid = suf_pos < ends[:, None]  # (B, S)
    suf_ids = ids.gather(1, suf_pos.clamp(max=T - 1))
    out = model.get_decoder()(
        inputs_embeds=rows.embed(model, suf_ids),
        attention_mask=torch.cat([prefix.mask, suf_valid], dim=1),  # (B, width + S)
        position_ids=suf_pos,
        output_hidden_states=layer != -1,
        **prefix.cache,
    )
    return out.last_hidden_state if layer == -1 else out.hidden_states[layer]  # (B, S, d)


def suffix_hidden(
    model: PreTrainedModel, rows: NewRows, batch: Batch, prefix: FrozenPrefix
) -> torch.Tensor:
    """Part 2: hidden states of the suffix (tokens ``[split, length - 1)``; the last token
    predicts nothing), with gradient into ``rows``, after the prefix's cache.

    Returns (B, width + S, d): the prefix's columns, then the suffix's."""
    device = rows.ids.device
    ids, lengths = batch.input_ids.to(device), batch.lengths.to(device)
    h_suf = run_suffix(model, rows, ids, lengths - 1, prefix)  # (B, S, d)
    return torch.cat([prefix.hidden.to(h_suf.dtype), h_suf], dim=1)


@dataclass
class AnswerTokens:
    """Where the loss is: answer token ``t`` of row ``row`` is predicted by the hidden
    state at ``t - 1``, which sits in column ``col`` of :func:`suffix_hidden`'s output."""

    row: torch.Tensor  # (N,)
    col: torch.Tensor  # (N,)
    target: torch.Tensor  # (N,) token ids
    direction: torch.Tensor  # (N,) direction of each token's example


def answer_tokens(batch: Batch, prefix: FrozenPrefix) -> AnswerTokens:
    device = prefix.split.device
    ids, lengths = batch.input_ids.to(device), batch.lengths.to(device)
    pos = torch.arange(ids.shape[1], device=device)
    answer = (pos[None, :] >= batch.answer_start.to(device)[:, None]) & (
        pos[None, :] < lengths[:, None]
    )
    row, t = answer.nonzero(as_tuple=True)  # (N,), (N,)
    src = t - 1
    split = prefix.split[row]
    col = torch.where(src < split, src, prefix.width + src - split)
    return AnswerTokens(row, col, ids[row, t], batch.direction.to(device)[row])


def answer_loss(logits: torch.Tensor, answers: AnswerTokens) -> StepLoss:
    """Part 3's end: cross-entropy of the answer logits (N, V), in at least float32."""
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    token_losses = F.cross_entropy(logits, answers.target, reduction="none")  # (N,)
    return StepLoss(token_losses.mean(), token_losses.detach(), answers.direction)


def batch_loss(
    model: PreTrainedModel, rows: NewRows, batch: Batch, *, shared: SharedPrefix | None = None
) -> StepLoss:
    """Parts 1-3 over the whole batch as one group: mean cross-entropy over its answer
    tokens, gradient into ``rows`` only.

    frozen prefix (no grad, once) -> suffix hidden states -> answer logits only (part
    3: the frozen head with the new rows swapped in, at the answer positions alone).
    """
    prefix = frozen_prefix(model, batch, rows.ids.device, shared)
    hidden = suffix_hidden(model, rows, batch, prefix)  # (B, width + S, d)
    answers = answer_tokens(batch, prefix)
    logits = rows.project(model, hidden[answers.row, answers.col])  # (N, V)
    return answer_loss(logits, answers)


def fast_loss(
    model: PreTrainedModel, rows: NewRows, batch: Batch, *, shared: SharedPrefix | None = None
) -> StepLoss:
    """Mean cross-entropy over the batch's answer tokens, gradient into ``rows`` only:
    ``batch_loss`` over each of ``row_groups`` (part 4), weighted by its answer tokens.
    Token losses come group by group (their directions alongside)."""
    groups = row_groups(batch)
    if on_any_process(model, len(groups) == 1):  # under --fsdp: the same count everywhere
        return batch_loss(model, rows, batch, shared=shared)
    parts = [batch_loss(model, rows, batch.select(g), shared=shared) for g in groups]
    counts = [len(p.token_losses) for p in parts]
    loss = sum(p.loss * n for p, n in zip(parts, counts, strict=True)) / sum(counts)
    return StepLoss(
        loss,  # type: ignore[arg-type]
        torch.cat([p.token_losses for p in parts]),
        torch.cat([p.token_direction for p in parts]),
    )
