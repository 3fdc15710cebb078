"""SFT data: user sequences -> a deterministic stream of training examples -> batches.

Example ``k`` of the stream is a pure function of (seed, k), as in the grounding
stage: each epoch is a seeded permutation of the next-item examples plus, for the
``lcrec`` mix, a seeded draw of alignment examples (item text -> SID and SID ->
item text, through the grounding templates). So the data position of a resumed
run is ``step * batch_size``, and any split of a global batch over processes sees
the same examples as one process does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from gti.data.tasks import TaskData
from gti.prompts import (
    TASK_NEXT_ITEM,
    TEMPLATE_SYSTEM,
    TEMPLATES,
    Example,
    SeededStream,
    instruction_and_answer,
    pad_right,
    render,
    render_next_item,
)

TASK_NAMES = ("next-item", "text->sid", "sid->text")  # task index -> name


@dataclass
class SFTBatch:
    """Right-padded sequences; the loss covers ``answer_mask``."""

    input_ids: torch.Tensor  # (B, T) long
    attention_mask: torch.Tensor  # (B, T) long, 1 on real tokens
    answer_mask: torch.Tensor  # (B, T) bool, tokens in the loss
    task: torch.Tensor  # (B,) long, index into TASK_NAMES

    @property
    def n_answer_tokens(self) -> int:
        return int(self.answer_mask.sum())


def collate(examples: list[Example], pad_id: int) -> SFTBatch:
    padded = pad_right(examples, pad_id)
    return SFTBatch(
        input_ids=padded.input_ids,
        attention_mask=padded.attention_mask.long(),
        answer_mask=padded.answer_mask,
        task=torch.tensor([e.direction for e in examples]),
    )


class SFTStream(SeededStream):
    """Training examples by global index; rendered lazily and memoized."""

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        data: TaskData,
        *,
        tasks: str,
        align_ratio: float,
        titles: bool,
        seed: int,
        max_text_chars: int = 400,
        system: str = TEMPLATE_SYSTEM,
    ) -> None:
        self.data = data
        self.system = system
        self.next_items = data.splits.train
        self.align_items = sorted(data.text_of)
        self.titles = titles
        self.max_text_chars = max_text_chars
        n_next = len(self.next_items)
        share = align_ratio if tasks == "lcrec" else 0.0
        self.n_align = round(n_next * share / (1 - share)) if self.align_items else 0
        super().__init__(tokenizer, seed=seed, epoch_size=n_next + self.n_align)

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        # per alignment slot: item, direction, template (reduced per direction)
        return rng.integers(0, 1 << 30, size=(self.n_align, 3))

    def key(self, index: int) -> tuple[int, int, int]:
        """(task, subject, template) of example ``index``: subject is a next-item
        example for task 0 and an item of the catalog for the alignment tasks."""
        slot, _, align = self.slot(index)
        if slot < len(self.next_items):
            return TASK_NEXT_ITEM, slot, 0
        item, direction, template = (int(v) for v in align[slot - len(self.next_items)])
        direction %= 2
        return (
            1 + direction,
            item % len(self.align_items),
            template % len(TEMPLATES[direction]),
        )

    def example(self, index: int) -> Example:
        key = self.key(index)
        return self.rendered(key, lambda: self._render(*key))

    def batch(self, indices: range | list[int]) -> SFTBatch:
        return collate([self.example(i) for i in indices], self.pad_id)

    def _render(self, task: int, subject: int, template: int) -> Example:
        d = self.data
        if task == TASK_NEXT_ITEM:
            ex = self.next_items[subject]
            titles = [d.title_of.get(i, "") for i in ex.history] if self.titles else None
            out = render_next_item(
                self.tokenizer,
                [d.sid_of[i] for i in ex.history],
                d.sid_of[ex.target],
                titles,
                system=self.system,
            )
            want = d.tokens_of[ex.target]
            got = out.input_ids[out.answer_start : out.answer_start + len(want)]
            if tuple(got) != want:
                raise RuntimeError(
                    f"the answer of a next-item example tokenizes to {list(got)}, not to the "
                    f"SID tokens {list(want)} of {ex.target!r}: the tokenizer merges them"
                )
            return out
        item = self.align_items[subject]
        text = d.text_of[item][: self.max_text_chars]
        instruction, answer = instruction_and_answer(task - 1, template, text, d.sid_of[item])
        return render(self.tokenizer, instruction, answer, task, system=self.system)
