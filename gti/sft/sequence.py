"""Sequence SFT: each user's training history as one token sequence, a next-item loss
at every item (``gti sft --objective sequence``).

A user's training history is the items of their training examples (the leave-one-out
split of :mod:`gti.data.sequences`, reused, not re-split): the first example's history
item, then every training target, in time order. It is written as

    prefix  sid(i_1)  sep  sid(i_2)  sep ... sid(i_m)

and the loss covers the SID tokens of every item but the first: the SID tokens of
item ``k`` are predicted from the prefix and items ``1..k-1``, as one example
"history = items before k, target = item k" would be, in one causal pass instead of
``m - 1`` prompts. The separator is not in the loss (it is the same after every item).

Long histories are cut into windows of ``window`` items starting every ``stride``
items (the last window ends at the last item). Each item is in the loss once: a
window labels only the items no earlier window reached, so each labelled item of a
later window has at least ``window - stride`` items of context. A window is an
example of the stream; epochs are seeded permutations of the windows, so example
``k`` is a pure function of (seed, k), as in :class:`gti.sft.data.SFTStream`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from gti.data.sequences import Example as NextItem
from gti.data.tasks import TaskData
from gti.prompts import TASK_NEXT_ITEM, SeededStream
from gti.sft.data import SFTBatch


@dataclass(frozen=True)
class Window:
    """One packed sequence: token ids and which of them are in the loss."""

    user_id: str
    items: tuple[str, ...]  # the window's items, oldest first
    input_ids: tuple[int, ...]
    in_loss: tuple[bool, ...]  # per token: an SID token of a labelled item
    item_spans: tuple[tuple[int, int], ...]  # per item: [start, end) of its SID tokens
    first_labelled: int  # index into ``items`` of the first item in the loss


def training_histories(train: list[NextItem]) -> dict[str, tuple[str, ...]]:
    """user -> their training items in time order, read off the leave-one-out train split
    (example ``t`` of a user predicts item ``t`` from the items before it)."""
    out: dict[str, list[str]] = {}
    for ex in train:
        items = out.get(ex.user_id)
        if items is None:  # the user's first example: history is exactly item 0
            if len(ex.history) != 1:
                raise ValueError(
                    f"user {ex.user_id!r}'s first training example has history "
                    f"{ex.history}; expected one item (leave_one_out order)"
                )
            items = out[ex.user_id] = [ex.history[0]]
        if ex.history != tuple(items[-len(ex.history) :]):
            raise ValueError(f"user {ex.user_id!r}'s training examples are not in time order")
        items.append(ex.target)
    return {u: tuple(v) for u, v in out.items()}


def window_bounds(n_items: int, window: int, stride: int) -> list[tuple[int, int, int]]:
    """(start, end, first labelled) item indices of a history's windows; each item but
    the first is labelled in exactly one window."""
    if n_items < 2:
        return []
    out, start, reached = [], 0, 1
    while True:
        end = min(start + window, n_items)
        out.append((start, end, reached))
        if end == n_items:
            return out
        reached, start = end, start + stride


def pack(
    user_id: str,
    items: tuple[str, ...],
    first_labelled: int,
    tokens_of: dict[str, tuple[int, ...]],
    prefix_ids: list[int],
    separator_ids: list[int],
) -> Window:
    ids, in_loss, spans = list(prefix_ids), [False] * len(prefix_ids), []
    for k, item in enumerate(items):
        if k:
            ids += separator_ids
            in_loss += [False] * len(separator_ids)
        sid = tokens_of[item]
        spans.append((len(ids), len(ids) + len(sid)))
        ids += sid
        in_loss += [k >= first_labelled] * len(sid)
    return Window(user_id, items, tuple(ids), tuple(in_loss), tuple(spans), first_labelled)


def text_ids(tokenizer: PreTrainedTokenizerBase, text: str, *, special: bool) -> list[int]:
    return list(tokenizer(text, add_special_tokens=special)["input_ids"]) if text or special else []


class SequenceStream(SeededStream):
    """Packed history windows by global index (the trainer's ``stream``)."""

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        data: TaskData,
        *,
        window: int,
        stride: int,
        prefix: str,
        separator: str,
        seed: int,
    ) -> None:
        if not 1 <= stride < window:
            raise ValueError(f"need 1 <= stride < window, got stride {stride}, window {window}")
        # The prefix carries the tokenizer's special start (BOS), as a prompt would.
        self.prefix_ids = text_ids(tokenizer, prefix, special=True)
        self.separator_ids = text_ids(tokenizer, separator, special=False)
        self.windows = [
            pack(user, items[s:e], first - s, data.tokens_of, self.prefix_ids, self.separator_ids)
            for user, items in training_histories(data.splits.train).items()
            for s, e, first in window_bounds(len(items), window, stride)
        ]
        if not self.windows:
            raise ValueError("no user has two training items: nothing to train on")
        super().__init__(tokenizer, seed=seed, epoch_size=len(self.windows))

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        return np.empty(0)  # nothing drawn per epoch beyond the permutation

    def window(self, index: int) -> Window:
        return self.windows[self.slot(index)[0]]

    def length(self, index: int) -> int:
        """Tokens of example ``index`` (the trainer groups micro-batches by it)."""
        return len(self.window(index).input_ids)

    def batch(self, indices: range | list[int]) -> SFTBatch:
        return collate_windows([self.window(i) for i in indices], self.pad_id)

    def tokens_per_epoch(self) -> int:
        """Real (unpadded) tokens of one pass over the windows."""
        return sum(len(w.input_ids) for w in self.windows)

    def loss_tokens_per_epoch(self) -> int:
        return sum(sum(w.in_loss) for w in self.windows)


def collate_windows(windows: list[Window], pad_id: int) -> SFTBatch:
    """Right-padded; padding is outside the attention mask and the loss."""
    lengths = torch.tensor([len(w.input_ids) for w in windows])  # (B,)
    T = int(lengths.max())
    ids = torch.full((len(windows), T), pad_id, dtype=torch.long)  # (B, T)
    in_loss = torch.zeros((len(windows), T), dtype=torch.bool)  # (B, T)
    for row, w in enumerate(windows):
        ids[row, : len(w.input_ids)] = torch.tensor(w.input_ids)
        in_loss[row, : len(w.in_loss)] = torch.tensor(w.in_loss)
    attention = (torch.arange(T)[None, :] < lengths[:, None]).long()  # (B, T)
    task = torch.full((len(windows),), TASK_NEXT_ITEM)  # (B,)
    return SFTBatch(input_ids=ids, attention_mask=attention, answer_mask=in_loss, task=task)
