"""The next-item task as text: a user's history written as SID strings, the next
item's SID as the answer. Shared by SFT (training sequences) and evaluation (prompts).

The rendering to token ids (chat template or ``instruction\\n``, answer, end of
turn) is the grounding stage's :func:`gti.init.templates.render`, so that SFT and
grounding speak to the model in the same format.
"""

from __future__ import annotations

from collections.abc import Sequence

from transformers import PreTrainedTokenizerBase

from geodiag.sidecar import SemanticIds
from gti.init.templates import Example, render

NEXT_ITEM = (
    "A user interacted with these items, oldest first: {history}. "
    "Which item will the user interact with next? Reply with its semantic ID."
)
TASK_NEXT_ITEM = 0  # the task index of next-item examples (alignment tasks are 1 and 2)


def history_text(sids: Sequence[str], titles: Sequence[str] | None = None) -> str:
    """``<a_1><b_2><c_3>, <a_4><b_5><c_6>`` or, with titles, ``<a_1><b_2><c_3> (Heat), ...``."""
    if titles is None:
        return ", ".join(sids)
    return ", ".join(f"{s} ({t})" if t else s for s, t in zip(sids, titles, strict=True))


def next_item_instruction(sids: Sequence[str], titles: Sequence[str] | None = None) -> str:
    return NEXT_ITEM.format(history=history_text(sids, titles))


def render_next_item(
    tokenizer: PreTrainedTokenizerBase,
    history_sids: Sequence[str],
    target_sid: str,
    titles: Sequence[str] | None = None,
) -> Example:
    """Token ids of one training sequence; the loss covers the answer (SID + end of turn)."""
    return render(
        tokenizer, next_item_instruction(history_sids, titles), target_sid, TASK_NEXT_ITEM
    )


def prompt_ids(
    tokenizer: PreTrainedTokenizerBase,
    history_sids: Sequence[str],
    titles: Sequence[str] | None = None,
) -> list[int]:
    """The prompt the model continues at evaluation: everything before the answer."""
    example = render(tokenizer, next_item_instruction(history_sids, titles), "", TASK_NEXT_ITEM)
    return list(example.input_ids[: example.answer_start])


def item_token_ids(sids: SemanticIds) -> dict[str, tuple[int, ...]]:
    """item id -> the token ids of its SID, one per level (needs an extended vocabulary)."""
    if not sids.has_token_ids:
        raise ValueError("the semantic IDs carry no token ids; pass a checkpoint from `gti init`")
    return {
        item: tuple(lv.token_ids[c] for lv, c in zip(sids.levels, codes, strict=True))
        for item, codes in sids.items.items()
    }
