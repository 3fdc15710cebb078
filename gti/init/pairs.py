"""The grounding data: a deterministic stream of (item, direction, template) examples,
and their collation into padded batches.

Example ``k`` of the stream is a pure function of (seed, k): each epoch is a seeded
permutation of all (item, direction) pairs with a seeded template per pair. So the
data position of a resumed run is just ``step * batch_size``: nothing else to save.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from gti.prompts import (
    DIRECTIONS,
    TEMPLATES,
    Example,
    Padded,
    SeededStream,
    Templates,
    instruction_and_answer,
    pad_right,
    render,
)


@dataclass
class Batch:
    """Right-padded sequences and where their answers and new tokens are."""

    input_ids: torch.Tensor  # (B, T) long, padded with pad_id
    attention_mask: torch.Tensor  # (B, T) bool
    lengths: torch.Tensor  # (B,) long, real tokens per row
    answer_start: torch.Tensor  # (B,) long, first loss position
    first_new: torch.Tensor  # (B,) long, first new-token position (= length when none)
    direction: torch.Tensor  # (B,) long, index into DIRECTIONS

    @property
    def answer_mask(self) -> torch.Tensor:
        """(B, T) bool: the positions whose tokens are in the loss."""
        return Padded(self.input_ids, self.lengths, self.answer_start).answer_mask

    def select(self, rows: torch.Tensor) -> Batch:
        """The batch of ``rows`` (k,) alone, its padding cut to their longest row."""
        rows = rows.to(self.lengths.device)
        T = int(self.lengths[rows].max())
        return Batch(
            input_ids=self.input_ids[rows, :T],
            attention_mask=self.attention_mask[rows, :T],
            lengths=self.lengths[rows],
            answer_start=self.answer_start[rows],
            first_new=self.first_new[rows],
            direction=self.direction[rows],
        )


def collate(examples: list[Example], pad_id: int, new_slot: torch.Tensor) -> Batch:
    """Pad ``examples`` on the right. ``new_slot`` (V,) is >= 0 exactly at new token ids."""
    padded = pad_right(examples, pad_id)
    mask = padded.attention_mask  # (B, T)
    is_new = (new_slot[padded.input_ids] >= 0) & mask  # (B, T)
    first_new = torch.where(is_new.any(1), is_new.int().argmax(1), padded.lengths)
    return Batch(
        input_ids=padded.input_ids,
        attention_mask=mask,
        lengths=padded.lengths,
        answer_start=padded.answer_start,
        first_new=first_new,
        direction=torch.tensor([e.direction for e in examples]),
    )


class PairStream(SeededStream):
    """Item texts paired with their SID strings, served as batches by step."""

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
        repeats: tuple[int, int] = (1, 1),
        templates: Templates = TEMPLATES,
    ) -> None:
        if len(texts) != len(sid_strings) or not texts:
            raise ValueError("need one SID string per item text, and at least one item")
        if len(repeats) != len(DIRECTIONS) or min(repeats) < 0 or sum(repeats) < 1:
            raise ValueError(f"repeats needs one count >= 0 per direction, got {repeats}")
        # One epoch shows every item ``repeats[d]`` times in direction d; epoch slot j
        # holds (item, direction) ``self._pairs[j]`` (with (1, 1): j = 2 item + direction).
        self.repeats = tuple(int(r) for r in repeats)
        self._pairs = np.array(
            [
                (i, d)
                for i in range(len(texts))
                for d, r in enumerate(self.repeats)
                for _ in range(r)
            ]
        )  # (n_pairs, 2)
        self.n_pairs = len(self._pairs)
        super().__init__(tokenizer, seed=seed, epoch_size=self.n_pairs)
        self.texts = [t if len(t) <= max_text_chars else t[:max_text_chars] for t in texts]
        self.sid_strings = sid_strings
        self.new_slot = new_slot
        self.batch_size = batch_size
        self.templates = templates

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(0, 1 << 30, size=self.n_pairs)  # a template per slot, reduced

    def key(self, index: int) -> tuple[int, int, int]:
        """(item, direction, template) of example ``index`` of the stream."""
        slot, pos, template = self.slot(index)
        item, direction = (int(v) for v in self._pairs[slot])
        return item, direction, int(template[pos]) % len(self.templates[direction])

    def example(self, key: tuple[int, int, int]) -> Example:
        item, direction, template = key
        text, sid = self.texts[item], self.sid_strings[item]

        def make() -> Example:
            instruction, answer = instruction_and_answer(
                direction, template, text, sid, self.templates
            )
            return render(self.tokenizer, instruction, answer, direction)

        return self.rendered(key, make)

    def common_prefix(self) -> list[int]:
        """The longest token prefix shared by every rendering (two items, every
        direction and template), cut before any new token: e.g. a chat template's
        system turn and user header. Batches are checked against it when used."""
        keys = [
            (item, d, t)
            for item in {0, min(1, len(self.texts) - 1)}
            for d in range(len(DIRECTIONS))
            for t in range(len(self.templates[d]))
        ]
        seqs = [self.example(k).input_ids for k in keys]
        n = 0
        while all(len(s) > n + 1 for s in seqs) and len({s[n] for s in seqs}) == 1:
            if int(self.new_slot[seqs[0][n]]) >= 0:
                break
            n += 1
        return list(seqs[0][:n])

    def batch(self, step: int) -> Batch:
        start = step * self.batch_size
        keys = [self.key(i) for i in range(start, start + self.batch_size)]
        return collate([self.example(k) for k in keys], self.pad_id, self.new_slot)
