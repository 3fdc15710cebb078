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
from pathlib import Path

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from geodiag.errors import InputError
from geodiag.sidecar import SemanticIds
from gti.data.sequences import Splits, k_core, leave_one_out
from gti.data.sources import load_dataset
from gti.init.run import sid_strings
from gti.init.templates import TEMPLATES, Example, instruction_and_answer, render
from gti.sft.prompts import TASK_NEXT_ITEM, item_token_ids, render_next_item

TASK_NAMES = ("next-item", "text->sid", "sid->text")  # task index -> name


@dataclass
class TaskData:
    """Everything the next-item task reads, for one catalog and its SIDs."""

    splits: Splits
    sid_of: dict[str, str]  # item id -> "<a_1><b_2><c_3>"
    text_of: dict[str, str]  # item id -> rendered catalog text
    title_of: dict[str, str]  # item id -> title ("" when the catalog has none)
    tokens_of: dict[str, tuple[int, ...]]  # item id -> SID token ids


def load_task_data(
    sids: SemanticIds,
    data: str,
    *,
    k_core_min: int,
    max_history: int,
    cache_dir: Path | None = None,
) -> TaskData:
    """Load ``data``, check it against the SIDs and cut it into leave-one-out splits."""
    dataset = load_dataset(data, cache_dir)
    catalog = dataset.catalog
    missing = [i for i in catalog.item_ids if i not in sids.items]
    if missing:
        raise InputError(
            "--data",
            f"{len(missing)} item(s) of {data!r} have no semantic ID (e.g. {missing[0]!r}); "
            "use the dataset the SIDs were built from",
        )
    splits = leave_one_out(k_core(dataset.interactions, k_core_min), max_history)
    if not splits.train or not splits.test:
        raise InputError(
            "--k-core",
            f"no training or test sequences left in {data!r} after {k_core_min}-core filtering; "
            "lower --k-core",
        )
    items = list(sids.items)
    by_id = {it.item_id: it for it in catalog.items}
    return TaskData(
        splits=splits,
        sid_of=dict(zip(items, sid_strings(sids, items), strict=True)),
        text_of={i: by_id[i].text for i in items if i in by_id},
        title_of={i: by_id[i].title for i in items if i in by_id},
        tokens_of=item_token_ids(sids),
    )


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
    lengths = torch.tensor([len(e.input_ids) for e in examples])  # (B,)
    T = int(lengths.max())
    ids = torch.full((len(examples), T), pad_id, dtype=torch.long)
    for row, e in enumerate(examples):
        ids[row, : len(e.input_ids)] = torch.tensor(e.input_ids)
    pos = torch.arange(T)[None, :]  # (1, T)
    start = torch.tensor([e.answer_start for e in examples])[:, None]  # (B, 1)
    return SFTBatch(
        input_ids=ids,
        attention_mask=(pos < lengths[:, None]).long(),
        answer_mask=(pos >= start) & (pos < lengths[:, None]),
        task=torch.tensor([e.direction for e in examples]),
    )


class SFTStream:
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
    ) -> None:
        self.tokenizer = tokenizer
        self.data = data
        self.next_items = data.splits.train
        self.align_items = sorted(data.text_of)
        self.titles = titles
        self.seed = seed
        self.max_text_chars = max_text_chars
        n_next = len(self.next_items)
        share = align_ratio if tasks == "lcrec" else 0.0
        self.n_align = round(n_next * share / (1 - share)) if self.align_items else 0
        self.epoch_size = n_next + self.n_align
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else tokenizer.eos_token_id or 0)
        self._epoch: tuple[int, np.ndarray, np.ndarray] | None = None
        self._rendered: dict[tuple[int, int, int], Example] = {}

    def _order(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        if self._epoch is None or self._epoch[0] != epoch:
            rng = np.random.default_rng([self.seed, epoch])
            perm = rng.permutation(self.epoch_size)
            # per alignment slot: item, direction, template (reduced per direction)
            align = rng.integers(0, 1 << 30, size=(self.n_align, 3))
            self._epoch = (epoch, perm, align)
        return self._epoch[1], self._epoch[2]

    def key(self, index: int) -> tuple[int, int, int]:
        """(task, subject, template) of example ``index``: subject is a next-item
        example for task 0 and an item of the catalog for the alignment tasks."""
        epoch, pos = divmod(index, self.epoch_size)
        perm, align = self._order(epoch)
        slot = int(perm[pos])
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
        if key not in self._rendered:
            self._rendered[key] = self._render(*key)
        return self._rendered[key]

    def batch(self, indices: range | list[int]) -> SFTBatch:
        return collate([self.example(i) for i in indices], self.pad_id)

    def _render(self, task: int, subject: int, template: int) -> Example:
        d = self.data
        if task == TASK_NEXT_ITEM:
            ex = self.next_items[subject]
            titles = [d.title_of.get(i, "") for i in ex.history] if self.titles else None
            out = render_next_item(
                self.tokenizer, [d.sid_of[i] for i in ex.history], d.sid_of[ex.target], titles
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
        return render(self.tokenizer, instruction, answer, task)
