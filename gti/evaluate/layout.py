"""What an evaluation prompt looks like: the layout the checkpoint was trained on.

A checkpoint trained with ``--objective example`` continues a chat prompt (system turn,
the next-item instruction with the history's SIDs, the assistant turn's start). One
trained with ``--objective sequence`` continues a packed history,
``prefix sid(i_1) sep ... sid(i_n) sep``: exactly the tokens before item ``n + 1``'s
SID in a training window (:func:`gti.sft.sequence.pack`), so an item's score at
evaluation is the log-probability training optimised at that position.

:class:`PromptLayout` carries both; :func:`layout_of` reads it off a checkpoint's
``sft_config.json`` (a checkpoint never fine-tuned gets the layout asked for, or the
example layout), and :func:`next_item_prompts` is the one place prompts are built for
``gti evaluate`` and the study's rankings.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from transformers import PreTrainedTokenizerBase

from geodiag.errors import InputError
from gti.checkpoint_files import SFT_CONFIG_FILENAME
from gti.data.sequences import Example
from gti.data.tasks import TaskData
from gti.options import PROMPT_DEFAULTS
from gti.prompts import prompt_ids
from gti.sft.config import OBJECTIVES, SFTConfig


@dataclass(frozen=True)
class PromptLayout:
    objective: str = "example"  # gti.sft.config.OBJECTIVES
    titles: bool = bool(PROMPT_DEFAULTS["titles"])  # example layout only
    system: str = str(PROMPT_DEFAULTS["system_prompt"])  # example layout only
    prefix: str = SFTConfig.sequence_prefix  # sequence layout only
    separator: str = SFTConfig.separator  # sequence layout only

    @classmethod
    def of_sft(cls, cfg: SFTConfig) -> PromptLayout:
        """The layout a run of ``cfg`` trains on."""
        return cls(cfg.objective, cfg.titles, cfg.system_prompt, cfg.sequence_prefix, cfg.separator)

    def settings(self) -> dict[str, object]:
        """The fields that matter for this layout (recorded beside results)."""
        if self.objective == "sequence":
            return {"objective": self.objective, "prefix": self.prefix, "separator": self.separator}
        return {"objective": self.objective, "titles": self.titles, "system_prompt": self.system}


def layout_of(checkpoint: Path, fallback: PromptLayout | None = None) -> PromptLayout:
    """The layout ``checkpoint`` was fine-tuned on (its ``sft_config.json``); ``fallback``
    (default: the example layout) for a checkpoint that records none."""
    base = fallback or PromptLayout()
    path = Path(checkpoint) / SFT_CONFIG_FILENAME
    if not path.is_file():
        return base
    trained = json.loads(path.read_text())
    objective = trained.get("objective", "example")  # written before --objective existed
    if objective not in OBJECTIVES:
        raise InputError(path, f"objective {objective!r} is not one of {OBJECTIVES}")
    return PromptLayout(
        objective=objective,
        titles=bool(trained.get("titles", base.titles)),
        system=str(trained.get("system_prompt", base.system)),
        prefix=str(trained.get("sequence_prefix", base.prefix)),
        separator=str(trained.get("separator", base.separator)),
    )


def sequence_prompt_ids(
    tokenizer: PreTrainedTokenizerBase,
    history_tokens: Sequence[Sequence[int]],
    prefix: str,
    separator: str,
) -> list[int]:
    """``prefix sid(i_1) sep ... sid(i_n) sep`` as token ids, tokenized as training packs
    them (the prefix with the tokenizer's special start, the separator alone)."""
    from gti.sft.sequence import text_ids

    ids = text_ids(tokenizer, prefix, special=True)
    sep = text_ids(tokenizer, separator, special=False)
    for tokens in history_tokens:
        ids += list(tokens) + sep
    return ids


def next_item_prompts(
    tokenizer: PreTrainedTokenizerBase,
    task: TaskData,
    examples: Sequence[Example],
    layout: PromptLayout,
) -> list[list[int]]:
    """The prompt of each example's user, in ``layout``: the model continues it with the
    next item's SID."""
    if layout.objective == "sequence":
        return [
            sequence_prompt_ids(
                tokenizer, [task.tokens_of[i] for i in e.history], layout.prefix, layout.separator
            )
            for e in examples
        ]
    return [
        prompt_ids(
            tokenizer,
            [task.sid_of[i] for i in e.history],
            [task.title_of.get(i, "") for i in e.history] if layout.titles else None,
            system=layout.system,
        )
        for e in examples
    ]
