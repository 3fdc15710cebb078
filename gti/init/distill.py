"""Token distillation as a grounding objective (Dobler et al., "Token Distillation:
Attention-aware Input Embeddings for New Tokens", ICLR 2026; first released as AweDist).

The frozen model already knows what an item's text means; the new rows should make its
SID mean the same thing to it. For an item and a context (:data:`CONTEXTS`, a user turn
rendered as grounding renders its prompts, up to the assistant header):

- teacher: the frozen model reading the context with the item's text. It holds no new
  token, so nothing in it depends on a trainable tensor: it runs under ``no_grad``.
- student: the same context with the item's SID string in place of the text, the new
  rows read from ``NewRows`` (gradient into them only).

The two token sequences share a prefix and a suffix; what differs is the span (the text's
tokens in one, the SID's in the other, with any boundary token the tokenizer merged into
them). Matched: every suffix position, the k-th suffix token of the student against the
k-th of the teacher, the last one (which predicts the answer's first token) included:

- ``hidden``: MSE of the hidden states at decoder output ``layer`` (1..L as
  ``output_hidden_states`` numbers them; -1: after the final norm, AweDist's default),
  mean over positions and dimensions;
- ``logits``: KL(teacher || student) of the next-token distributions over the original
  vocabulary (the new tokens' columns left out: with a tied head they are the rows being
  trained, and the teacher has no reason to predict them), mean over positions.

Not matched: the prefix (equal in both by causal attention) and the span itself (AweDist
matches a merged word's last token with its last piece; an item's text is no spelling of
its SID, so no span position of one has a counterpart in the other). Each sequence keeps
its own positions, so the student's suffix sits closer to the start, as in AweDist's
shorter merged sequences; with rotary positions only distances matter.

Targets are recomputed every step from the step's batch (a no-grad forward), so a step
stays a pure function of (rows, seed, step) and a resumed run equals an uninterrupted one
bit for bit. Distillation trains the input rows; an untied head's rows move only
through cross-entropy (``ce+distill``), as in Token Distillation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from geodiag.errors import InputError
from gti.init.config import GroundingConfig
from gti.init.grounding import NewRows, SharedPrefix, frozen_prefix, output_head, run_suffix
from gti.init.pairs import Batch
from gti.prompts import Example, SeededStream, pad_right, render

# Where an item is read: words a catalog entry appears among, with a suffix after it for
# the student to be matched on. Not grounding's templates: those ask for the SID or the
# text, whose answer then differs between teacher and student.
CONTEXTS = (
    "Item: {item}\nDescribe this item in one sentence.",
    "A user is looking at {item}. Who would enjoy it, and why?",
    "{item}\nWhat kind of item is this?",
)


@dataclass(frozen=True)
class DistillExample:
    """The teacher's and the student's token ids of one (item, context)."""

    teacher: tuple[int, ...]
    student: tuple[int, ...]
    span_start: int  # first position where the two differ
    n_suffix: int  # matched positions: the last n_suffix tokens of each


def prompt_of(tokenizer: PreTrainedTokenizerBase, instruction: str) -> tuple[int, ...]:
    """Token ids of ``instruction`` as a user turn, up to where the answer would start."""
    ex = render(tokenizer, instruction, "", direction=0)
    return ex.input_ids[: ex.answer_start]


def pair_example(
    tokenizer: PreTrainedTokenizerBase,
    context: str,
    text: str,
    sid: str,
    new_slot: torch.Tensor,
) -> DistillExample:
    """The distillation pair of an item's ``text`` and ``sid`` string in ``context``."""
    teacher = prompt_of(tokenizer, context.format(item=text))
    student = prompt_of(tokenizer, context.format(item=sid))
    n = min(len(teacher), len(student))
    start = 0
    while start < n and teacher[start] == student[start]:
        start += 1
    n_suffix = 0
    while n_suffix < n - start and teacher[-1 - n_suffix] == student[-1 - n_suffix]:
        n_suffix += 1
    span = student[start : len(student) - n_suffix]
    if not any(int(new_slot[t]) >= 0 for t in span) or n_suffix == 0:
        raise ValueError(
            f"context {context!r} with SID {sid!r}: the SID's new tokens must lie between "
            "a shared prefix and a shared, non-empty suffix"
        )
    return DistillExample(teacher, student, start, n_suffix)


@dataclass
class DistillBatch:
    """Teacher and student rows of the same (item, context) pairs, right-padded.

    Both are grounding :class:`Batch` es with no answer (``answer_start`` = length), so
    their frozen prefix ends at ``first_new``: the student's first new token, the
    teacher's span start (its prefix is the student's)."""

    teacher: Batch
    student: Batch
    n_suffix: torch.Tensor  # (B,) long

    def select(self, rows: torch.Tensor) -> DistillBatch:
        rows = rows.to(self.n_suffix.device)
        return DistillBatch(
            self.teacher.select(rows), self.student.select(rows), self.n_suffix[rows]
        )


def _batch(seqs: list[tuple[int, ...]], first_new: torch.Tensor, pad_id: int) -> Batch:
    padded = pad_right([Example(s, len(s), 0) for s in seqs], pad_id)
    return Batch(
        input_ids=padded.input_ids,
        attention_mask=padded.attention_mask,
        lengths=padded.lengths,
        answer_start=padded.lengths,
        first_new=first_new,
        direction=torch.zeros(len(seqs), dtype=torch.long),
    )


def collate_pairs(
    examples: list[DistillExample], pad_id: int, new_slot: torch.Tensor
) -> DistillBatch:
    student_first = [
        next(i for i, t in enumerate(e.student) if int(new_slot[t]) >= 0) for e in examples
    ]
    return DistillBatch(
        teacher=_batch(
            [e.teacher for e in examples], torch.tensor([e.span_start for e in examples]), pad_id
        ),
        student=_batch([e.student for e in examples], torch.tensor(student_first), pad_id),
        n_suffix=torch.tensor([e.n_suffix for e in examples]),
    )


class DistillStream(SeededStream):
    """Items in context, served as distillation batches by step: each epoch a seeded
    permutation of the items, a seeded context per item (a pure function of seed and
    example index, as :class:`gti.init.pairs.PairStream`)."""

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        texts: list[str],
        sid_strings: list[str],
        new_slot: torch.Tensor,
        *,
        batch_size: int,
        seed: int,
        max_text_chars: int = 400,
        contexts: tuple[str, ...] = CONTEXTS,
    ) -> None:
        if len(texts) != len(sid_strings) or not texts:
            raise ValueError("need one SID string per item text, and at least one item")
        super().__init__(tokenizer, seed=seed, epoch_size=len(texts))
        self.texts = [t[:max_text_chars] for t in texts]
        self.sid_strings = sid_strings
        self.new_slot = new_slot
        self.batch_size = batch_size
        self.contexts = contexts
        self._pairs: dict[tuple[int, int], DistillExample] = {}

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(0, len(self.contexts), size=self.epoch_size)

    def key(self, index: int) -> tuple[int, int]:
        """(item, context) of example ``index`` of the stream."""
        item, _, contexts = self.slot(index)
        return item, int(contexts[item])

    def example(self, key: tuple[int, int]) -> DistillExample:
        if key not in self._pairs:
            item, context = key
            self._pairs[key] = pair_example(
                self.tokenizer,
                self.contexts[context],
                self.texts[item],
                self.sid_strings[item],
                self.new_slot,
            )
        return self._pairs[key]

    def common_prefix(self) -> list[int]:
        """The token prefix every teacher and student shares (two items, every context):
        e.g. a chat template's system turn and user header."""
        items = {0, min(1, len(self.texts) - 1)}
        examples = [self.example((i, c)) for i in items for c in range(len(self.contexts))]
        n = min(e.span_start for e in examples)
        seqs = [e.student for e in examples]
        k = 0
        while k < n and len({s[k] for s in seqs}) == 1:
            k += 1
        return list(seqs[0][:k])

    def batch(self, step: int) -> DistillBatch:
        start = step * self.batch_size
        keys = [self.key(i) for i in range(start, start + self.batch_size)]
        return collate_pairs([self.example(k) for k in keys], self.pad_id, self.new_slot)


def distill_stream(
    tokenizer: PreTrainedTokenizerBase,
    texts: list[str],
    sid_strings: list[str],
    new_slot: torch.Tensor,
    cfg: GroundingConfig,
) -> DistillStream | None:
    """The run's distillation stream, or None when its objective does not distill."""
    if not cfg.uses_distill:
        return None
    return DistillStream(
        tokenizer,
        texts,
        sid_strings,
        new_slot,
        batch_size=cfg.batch_size,
        seed=cfg.seed,
        max_text_chars=cfg.max_text_chars,
    )


def check_layer(model: PreTrainedModel, layer: int) -> None:
    """Refuse a ``--distill-layer`` past the model's depth."""
    depth = int(model.config.num_hidden_layers)
    if layer > depth:
        raise InputError("--distill-layer", f"the model has {depth} layers; pick 1..{depth} or -1")


@dataclass
class DistillLoss:
    loss: torch.Tensor  # scalar, mean over all matched positions of the batch
    position_losses: torch.Tensor  # (N,) detached, one per matched position


def suffix_states(
    model: PreTrainedModel,
    rows: NewRows,
    batch: Batch,
    n_suffix: torch.Tensor,
    layer: int,
    shared: SharedPrefix | None,
) -> torch.Tensor:
    """(N, d): the hidden states at ``layer`` of each row's last ``n_suffix`` positions,
    row by row (with gradient into ``rows`` where the rows hold new tokens)."""
    device = rows.ids.device
    prefix = frozen_prefix(model, batch, device, shared)
    ids, lengths = batch.input_ids.to(device), batch.lengths.to(device)
    hidden = run_suffix(model, rows, ids, lengths, prefix, layer=layer)  # (B, S, d)
    n_suffix = n_suffix.to(device)
    row = torch.repeat_interleave(torch.arange(len(lengths), device=device), n_suffix)  # (N,)
    first = torch.cumsum(n_suffix, 0) - n_suffix  # (B,) offset of each row's block
    k = torch.arange(len(row), device=device) - first[row]  # (N,) index within the suffix
    pos = lengths[row] - n_suffix[row] + k  # (N,) absolute position
    return hidden[row, pos - prefix.split[row]]


def wide(x: torch.Tensor) -> torch.Tensor:
    """``x`` in at least float32 (bf16 / fp16 states are widened; float64 stays)."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def next_token_logprobs(
    model: PreTrainedModel, rows: NewRows, hidden: torch.Tensor
) -> torch.Tensor:
    """(N, V_old) log-probabilities over the original vocabulary (frozen head columns)."""
    head = output_head(model)
    logits = wide(hidden) @ wide(head.weight.detach()).T  # (N, V)
    if getattr(head, "bias", None) is not None:
        logits = logits + head.bias.detach()
    # The original tokens only: a padded vocabulary's rows past the tokenizer are no token.
    return F.log_softmax(logits[:, : rows.n_old], dim=-1)  # (N, V_old)


def distill_loss(
    model: PreTrainedModel,
    rows: NewRows,
    batch: DistillBatch,
    *,
    target: str = "hidden",
    layer: int = -1,
    shared: SharedPrefix | None = None,
) -> DistillLoss:
    """The student's distance from the teacher over the batch's matched positions (see
    the module docstring), in at least float32; gradient into ``rows`` only."""
    at = layer if target == "hidden" else -1
    with torch.no_grad():
        teacher = suffix_states(model, rows, batch.teacher, batch.n_suffix, at, shared)
    student = suffix_states(model, rows, batch.student, batch.n_suffix, at, shared)  # (N, d)
    if target == "hidden":
        losses = (wide(student) - wide(teacher)).pow(2).mean(-1)  # (N,)
    else:
        log_t = next_token_logprobs(model, rows, teacher)
        log_s = next_token_logprobs(model, rows, student)
        kl = F.kl_div(log_s, log_t, reduction="none", log_target=True)  # (N, V_old)
        losses = kl.sum(-1)  # (N,) KL(teacher || student)
    return DistillLoss(losses.mean(), losses.detach())
