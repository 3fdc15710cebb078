"""Paired supervision for grounding: instructions in both directions, rendered to ids.

Item text -> SID and SID -> item text, each through several phrasings so the new
rows learn the pairing, not one sentence. The SID sits at the end of the SID ->
text instructions on purpose: everything before the first new token is frozen
context, which the fast trainer runs once without gradient (grounding.py).

With a chat template the user turn is the instruction and the assistant turn the
answer; without one, ``instruction\\n`` then ``answer<eos>``. The loss covers the
answer tokens only (and the end-of-turn token, which teaches where a SID ends).
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase

TEXT_TO_SID = (
    "Which semantic ID identifies this item? {text}",
    "Give the semantic ID of the following item: {text}",
    "Item description: {text}\nReply with the item's semantic ID.",
    "Map this item to its semantic ID tokens: {text}",
    "Here is an item from the catalog: {text}\nWhat is its semantic ID?",
)
SID_TO_TEXT = (
    "Describe the item with the semantic ID {sid}",
    "What item does this semantic ID stand for? {sid}",
    "Give the title and details of the item identified by {sid}",
    "Tell me which item in the catalog has the semantic ID {sid}",
    "Which item is {sid}",
)
DIRECTIONS = ("text->sid", "sid->text")
TEMPLATES = (TEXT_TO_SID, SID_TO_TEXT)


@dataclass(frozen=True)
class Example:
    """One rendered training sequence."""

    input_ids: tuple[int, ...]
    answer_start: int  # first position whose token is in the loss
    direction: int  # index into DIRECTIONS


def instruction_and_answer(direction: int, template: int, text: str, sid: str) -> tuple[str, str]:
    if direction == 0:
        return TEXT_TO_SID[template].format(text=text), sid
    return SID_TO_TEXT[template].format(sid=sid), text


def render(
    tokenizer: PreTrainedTokenizerBase, instruction: str, answer: str, direction: int
) -> Example:
    """Token ids of one user/assistant exchange and where the answer starts."""
    if tokenizer.chat_template:
        user = [{"role": "user", "content": instruction}]
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
