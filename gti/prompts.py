"""How gti speaks to the model: user/assistant exchanges rendered to token ids, with
the answer located for the loss. Shared by grounding (``gti init``), SFT and evaluation.

Grounding's paired supervision: item text -> SID and SID -> item text, each through
several phrasings so the new rows learn the pairing, not one sentence. The SID sits
at the end of the SID -> text instructions on purpose: everything before the first
new token is frozen context, which the fast trainer runs once without gradient
(``gti.init.grounding``). SFT's alignment tasks (LC-Rec) reuse these templates.

The next-item task: a user's history written as SID strings, the next item's SID as
the answer (SFT's training sequences, evaluation's prompts).

With a chat template the user turn is the instruction and the assistant turn the
answer; without one, ``instruction\\n`` then ``answer<eos>``. The loss covers the
answer tokens only (and the end-of-turn token, which teaches where a SID ends).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from geodiag.errors import InputError
from geodiag.io.vocabulary.sidecar import SemanticIds, token_string
from geodiag.jsonio import read_document
from gti.options import TEMPLATE_SYSTEM

# The shipped templates (one place: the TOML file, which documents them); a user's copy
# is read by the same function (``gti init --templates FILE``).
TEMPLATES_FILE = Path(__file__).parent / "presets" / "prompts" / "default.toml"
PLACEHOLDERS = ("{text}", "{sid}")  # the one each direction's templates must hold


def load_templates(path: str | os.PathLike[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(text -> SID templates, SID -> text templates) of a templates TOML file."""
    path = Path(path)
    data = read_document(path, tomllib.loads, "TOML")
    out = []
    for key, hole in zip(("text_to_sid", "sid_to_text"), PLACEHOLDERS, strict=True):
        templates = data.get(key)
        if not isinstance(templates, list) or not templates:
            raise InputError(path, f"'{key}' must be a non-empty list of strings")
        for k, t in enumerate(templates):
            if not isinstance(t, str) or hole not in t:
                raise InputError(path, f"{key}[{k}] must be a string holding {hole}")
            try:
                t.format(text="", sid="")
            except (KeyError, IndexError, ValueError) as e:
                raise InputError(path, f"{key}[{k}]: only {hole} may be in braces ({e})") from None
        out.append(tuple(templates))
    return out[0], out[1]


TEXT_TO_SID, SID_TO_TEXT = load_templates(TEMPLATES_FILE)
DIRECTIONS = ("text->sid", "sid->text")
TEMPLATES = (TEXT_TO_SID, SID_TO_TEXT)
Templates = tuple[tuple[str, ...], tuple[str, ...]]


@dataclass(frozen=True)
class Example:
    """One rendered training sequence."""

    input_ids: tuple[int, ...]
    answer_start: int  # first position whose token is in the loss
    direction: int  # index into DIRECTIONS


def instruction_and_answer(
    direction: int, template: int, text: str, sid: str, templates: Templates = TEMPLATES
) -> tuple[str, str]:
    if direction == 0:
        return templates[0][template].format(text=text), sid
    return templates[1][template].format(sid=sid), text


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
    system: str = TEMPLATE_SYSTEM,
) -> Example:
    """Token ids of one training sequence; the loss covers the answer (SID + end of turn)."""
    return render(
        tokenizer,
        next_item_instruction(history_sids, titles),
        target_sid,
        TASK_NEXT_ITEM,
        system=system,
    )


def prompt_ids(
    tokenizer: PreTrainedTokenizerBase,
    history_sids: Sequence[str],
    titles: Sequence[str] | None = None,
    system: str = TEMPLATE_SYSTEM,
) -> list[int]:
    """The prompt the model continues at evaluation: everything before the answer."""
    example = render(
        tokenizer, next_item_instruction(history_sids, titles), "", TASK_NEXT_ITEM, system=system
    )
    return list(example.input_ids[: example.answer_start])


def item_token_ids(sids: SemanticIds) -> dict[str, tuple[int, ...]]:
    """item id -> the token ids of its SID, one per level (needs an extended vocabulary)."""
    if not sids.has_token_ids:
        raise ValueError("the semantic IDs carry no token ids; pass a checkpoint from `gti init`")
    return {
        item: tuple(lv.token_ids[c] for lv, c in zip(sids.levels, codes, strict=True))
        for item, codes in sids.items.items()
    }


def sid_strings(sids: SemanticIds, items: list[str]) -> list[str]:
    """``<a_3><b_17><c_5>`` per item."""
    return [
        "".join(token_string(lv.name, c) for lv, c in zip(sids.levels, sids.items[i], strict=True))
        for i in items
    ]


def render(
    tokenizer: PreTrainedTokenizerBase,
    instruction: str,
    answer: str,
    direction: int,
    *,
    system: str = TEMPLATE_SYSTEM,
) -> Example:
    """Token ids of one user/assistant exchange and where the answer starts.

    ``system``: :data:`TEMPLATE_SYSTEM` leaves the system turn to the chat template
    (SmolLM2's adds its default one, 21 tokens); any other string is sent as the
    system message, ``""`` giving an empty system turn (5 tokens with SmolLM2's
    template). Ignored without a chat template.
    """
    if tokenizer.chat_template:
        user = [{"role": "user", "content": instruction}]
        if system != TEMPLATE_SYSTEM:
            user = [{"role": "system", "content": system}, *user]
        prompt = _ids(tokenizer.apply_chat_template(user, add_generation_prompt=True))
        full = _ids(
            tokenizer.apply_chat_template(user + [{"role": "assistant", "content": answer}])
        )
        if full[: len(prompt)] != prompt:
            raise ValueError(
                "the chat template renders the prompt differently with and without an "
                "answer; the answer tokens cannot be located"
            )
        # Drop what follows the end-of-turn token when it is only whitespace: nothing
        # after it is predicted, so it would cost compute for no loss term.
        while len(full) > len(prompt) + 1 and not tokenizer.decode(full[-1:]).strip():
            full = full[:-1]
        return Example(tuple(full), len(prompt), direction)
    if tokenizer.eos_token_id is None:
        raise ValueError("a tokenizer without chat template needs an eos token")
    prompt = tokenizer(instruction + "\n", add_special_tokens=True)["input_ids"]
    answer_ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
    return Example(tuple(prompt + answer_ids + [tokenizer.eos_token_id]), len(prompt), direction)


def _ids(rendered: object) -> list[int]:
    # transformers 5 returns a BatchEncoding from apply_chat_template, 4.x a list.
    if isinstance(rendered, list):
        return [int(i) for i in rendered]
    return [int(i) for i in rendered["input_ids"]]  # type: ignore[index]


class SeededStream:
    """Training examples by global index, each a pure function of (seed, index), so a
    resumed run's data position is just ``step * batch_size``. Epoch ``e`` is a
    permutation of the epoch's slots drawn from ``default_rng([seed, e])``, followed
    by the subclass's per-epoch draws (:meth:`draw`); each distinct example is
    rendered once (:meth:`rendered`)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, *, seed: int, epoch_size: int) -> None:
        self.tokenizer = tokenizer
        self.seed = seed
        self.epoch_size = epoch_size
        self.pad_id = pad_id_of(tokenizer)
        self._epoch: tuple[int, np.ndarray, np.ndarray] | None = None
        self._rendered: dict[tuple[int, ...], Example] = {}

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        """The epoch's draws after its permutation (e.g. a template per slot)."""
        raise NotImplementedError

    def slot(self, index: int) -> tuple[int, int, np.ndarray]:
        """(slot, position in the epoch, the epoch's draws) of example ``index``."""
        epoch, pos = divmod(index, self.epoch_size)
        if self._epoch is None or self._epoch[0] != epoch:
            rng = np.random.default_rng([self.seed, epoch])
            perm = rng.permutation(self.epoch_size)
            self._epoch = (epoch, perm, self.draw(rng))
        return int(self._epoch[1][pos]), pos, self._epoch[2]

    def rendered(self, key: tuple[int, ...], make: Callable[[], Example]) -> Example:
        if key not in self._rendered:
            self._rendered[key] = make()
        return self._rendered[key]


def pad_id_of(tokenizer: PreTrainedTokenizerBase) -> int:
    """The id padding is filled with: the pad token, else end-of-sequence, else 0
    (padded positions are masked out either way)."""
    pad = tokenizer.pad_token_id
    return int(pad if pad is not None else tokenizer.eos_token_id or 0)


@dataclass
class Padded:
    """Rendered examples padded on the right, and where their answers are."""

    input_ids: torch.Tensor  # (B, T) long, padded with the pad id
    lengths: torch.Tensor  # (B,) long, real tokens per row
    answer_start: torch.Tensor  # (B,) long, first position in the loss

    @property
    def attention_mask(self) -> torch.Tensor:
        """(B, T) bool: real tokens."""
        pos = torch.arange(self.input_ids.shape[1], device=self.input_ids.device)
        return pos[None, :] < self.lengths[:, None]

    @property
    def answer_mask(self) -> torch.Tensor:
        """(B, T) bool: the positions whose tokens are in the loss (the answer)."""
        pos = torch.arange(self.input_ids.shape[1], device=self.input_ids.device)
        return (pos[None, :] >= self.answer_start[:, None]) & self.attention_mask


def pad_right(examples: Sequence[Example], pad_id: int) -> Padded:
    """Pad ``examples`` on the right into one batch."""
    lengths = torch.tensor([len(e.input_ids) for e in examples])  # (B,)
    ids = torch.full((len(examples), int(lengths.max())), pad_id, dtype=torch.long)
    for row, e in enumerate(examples):
        ids[row, : len(e.input_ids)] = torch.tensor(e.input_ids)
    return Padded(ids, lengths, torch.tensor([e.answer_start for e in examples]))
