"""The SFT example stream: deterministic by index, epochs that cover the data, the
LC-Rec mix at its ratio, answers that are exactly the SID (+ end of turn)."""

from __future__ import annotations

import copy

import pytest
from sftworld import ORDERS
from transformers import AutoTokenizer

from geodiag.io.vocabulary.sidecar import load
from gti.data.tasks import load_task_data
from gti.prompts import TASK_NEXT_ITEM, TEMPLATE_SYSTEM, next_item_instruction, prompt_ids
from gti.sft.config import SFTConfig
from gti.sft.data import SFTStream
from gti.sft.trainer import micro_batches
from gti.training import get_lr


@pytest.fixture(scope="module")
def task(world):
    sids = load(world.init)
    tok = AutoTokenizer.from_pretrained(world.init)
    return tok, load_task_data(sids, world.data_spec, k_core_min=1, max_history=3)


def stream(task, tasks="next-item", seed=0, ratio=0.25):
    tok, data = task
    return SFTStream(tok, data, tasks=tasks, align_ratio=ratio, titles=False, seed=seed)


def test_splits_are_leave_one_out(task):
    _, data = task
    assert len(data.splits.train) == len(ORDERS) * 4  # 7 events: test, valid, 4 train
    assert all(len(e.history) <= 3 for e in data.splits.train)


def test_stream_is_a_pure_function_of_seed_and_index(task):
    a, b, c = stream(task), stream(task), stream(task, seed=1)
    keys = [a.key(i) for i in range(50)]
    assert keys == [b.key(i) for i in reversed(range(50))][::-1]  # order of calls is irrelevant
    assert keys != [c.key(i) for i in range(50)]
    assert a.example(7) == b.example(7)


def test_an_epoch_covers_every_next_item_example_once(task):
    s = stream(task)
    n = len(task[1].splits.train)
    assert s.epoch_size == n
    for epoch in range(2):
        subjects = sorted(s.key(epoch * n + i)[1] for i in range(n))
        assert subjects == list(range(n))


def test_lcrec_mix_has_its_ratio_and_both_directions(task):
    s = stream(task, tasks="lcrec", ratio=0.5)
    n = len(task[1].splits.train)
    assert s.n_align == n and s.epoch_size == 2 * n
    tasks = [s.key(i)[0] for i in range(s.epoch_size)]
    assert tasks.count(TASK_NEXT_ITEM) == n
    assert {1, 2} <= set(tasks)


def test_answer_is_the_sid_and_the_prompt_is_the_eval_prompt(task):
    tok, data = task
    s = stream(task)
    batch = s.batch(range(6))
    for row in range(6):
        ex = data.splits.train[s.key(row)[1]]
        answer = batch.input_ids[row][batch.answer_mask[row]].tolist()
        assert answer == [*data.tokens_of[ex.target], tok.eos_token_id]
        start = int(batch.answer_mask[row].int().argmax())
        assert batch.input_ids[row, :start].tolist() == prompt_ids(
            tok, [data.sid_of[i] for i in ex.history]
        )


def test_micro_batches_partition_the_global_batch():
    cfg = SFTConfig(batch_size=8, micro_batch_size=2)
    for step in (0, 3):
        got = sorted(i for r in range(2) for mb in micro_batches(step, cfg, r, 2) for i in mb)
        assert got == list(range(step * 8, step * 8 + 8))
        assert len(micro_batches(step, cfg, 0, 2)) == 2  # 8 / (2 x 2 processes) / 2 per micro


def test_lr_schedule_golden_values():
    cfg = SFTConfig(steps=11, lr=1.0, warmup_steps=2, min_lr_ratio=0.1)
    lrs = [get_lr(s, lr=1.0, warmup_steps=2, total_steps=11, min_lr_ratio=0.1) for s in range(11)]
    assert lrs[:2] == [0.5, 1.0]  # linear warmup
    assert lrs[2] == pytest.approx(1.0) and lrs[-1] == pytest.approx(0.1)
    assert lrs[6] == pytest.approx(0.55)  # halfway through the cosine: (1 + 0.1) / 2
    assert all(a >= b for a, b in zip(lrs[1:], lrs[2:], strict=False))
    assert cfg.steps == 11  # the SFT loop calls it with these fields (gti.sft.trainer)


def test_grounding_schedule_is_the_same_function():
    """Grounding's decay reaches 0 at its last step (its --decay help), as SFT's cosine
    reaches lr x min_lr_ratio; "none" keeps the rate after warm-up."""
    cosine = [get_lr(s, lr=2.0, warmup_steps=1, total_steps=5, decay="cosine") for s in range(5)]
    assert cosine == pytest.approx([2.0, 2.0, 1.5, 0.5, 0.0])  # cos over 3 steps to 0
    flat = [get_lr(s, lr=2.0, warmup_steps=2, total_steps=5, decay="none") for s in range(5)]
    assert flat == [1.0, 2.0, 2.0, 2.0, 2.0]


# SmolLM2-135M-Instruct's chat template, reduced to its system-turn logic: a default
# system turn when the conversation does not start with one.
CHAT = (
    "{% for m in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful AI assistant<|im_end|>\n{% endif %}"
    "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture
def chat_task(task):
    tok, data = task
    chat = copy.deepcopy(tok)
    chat.chat_template = CHAT
    return chat, data


@pytest.mark.parametrize(
    ("system", "head"),
    [
        (TEMPLATE_SYSTEM, "<|im_start|>system\nYou are a helpful AI assistant<|im_end|>\n"),
        ("", "<|im_start|>system\n<|im_end|>\n"),
        ("be brief", "<|im_start|>system\nbe brief<|im_end|>\n"),
    ],
)
def test_system_prompt_option_renders_the_system_turn_it_names(chat_task, system, head):
    tok, data = chat_task
    s = SFTStream(tok, data, tasks="next-item", align_ratio=0, titles=False, seed=0, system=system)
    ex = data.splits.train[s.key(0)[1]]
    history = [data.sid_of[i] for i in ex.history]
    want = head + "<|im_start|>user\n" + next_item_instruction(history) + "<|im_end|>\n"
    want += "<|im_start|>assistant\n"
    prompt = prompt_ids(tok, history, system=system)
    # (the word-level test tokenizer spells unknown words [UNK]: compare ids, not text)
    assert prompt == tok(want, add_special_tokens=False)["input_ids"]
    # the training example starts with exactly the evaluation prompt, then the SID
    out = s.example(0)
    assert list(out.input_ids[: out.answer_start]) == prompt
    assert tuple(out.input_ids[out.answer_start :][:3]) == data.tokens_of[ex.target]


def test_an_empty_system_turn_is_shorter_than_the_templates(chat_task):
    tok, data = chat_task
    history = [data.sid_of[i] for i in data.splits.train[0].history]
    default = prompt_ids(tok, history)
    empty = prompt_ids(tok, history, system="")
    assert len(empty) < len(default)
    assert default[-len(empty) + 4 :] == empty[4:]  # same user turn after the system turn
