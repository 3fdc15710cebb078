"""Sequence SFT (--objective sequence): histories read off the train split, windows that
label each item once, a per-position loss equal to the per-example route's on the same
prefixes, and bf16 autocast within its rounding bound."""

from __future__ import annotations

import pytest
import torch
from sftworld import ORDERS
from transformers import AutoModelForCausalLM, AutoTokenizer

from geodiag.io.vocabulary.sidecar import load
from gti.data.tasks import load_task_data
from gti.prompts import next_item_instruction, render
from gti.sft.config import SFTConfig
from gti.sft.data import SFTStream
from gti.sft.loss import AnswerLoss
from gti.sft.run import cpu_has_bf16, use_bf16
from gti.sft.sequence import SequenceStream, training_histories, window_bounds

PREFIX, SEP = SFTConfig.sequence_prefix, SFTConfig.separator


@pytest.fixture(scope="module")
def task(world):
    tok = AutoTokenizer.from_pretrained(world.init)
    return tok, load_task_data(load(world.init), world.data_spec, k_core_min=1, max_history=3)


def seq_stream(task, window=4, stride=3, prefix=PREFIX, separator=SEP):
    tok, data = task
    return SequenceStream(
        tok, data, window=window, stride=stride, prefix=prefix, separator=separator, seed=0
    )


def test_histories_are_the_train_split_in_time_order(task):
    _, data = task
    hist = training_histories(data.splits.train)
    # 7 events: the last two are valid and test, the first five are training items.
    assert hist == {f"u{u}": tuple(f"m{i}" for i in order[:5]) for u, order in enumerate(ORDERS)}


@pytest.mark.parametrize(
    ("n", "window", "stride"), [(1, 4, 3), (5, 4, 3), (100, 64, 44), (7, 3, 1)]
)
def test_windows_label_each_item_but_the_first_once(n, window, stride):
    bounds = window_bounds(n, window, stride)
    labelled = [k for s, e, first in bounds for k in range(first, e)]
    assert labelled == list(range(1, n))  # once each, in order
    for s, e, first in bounds:
        assert e - s <= window and s < first
        if s:  # a later window's first labelled item sees window - stride items before it
            assert first - s == window - stride


def test_sequence_is_the_history_span_of_todays_prompt(task):
    """With the default prefix and separator, a window is token for token the start of
    today's next-item instruction up to the end of its history."""
    tok, data = task
    w = seq_stream(task, window=5).windows[0]
    sids = [data.sid_of[i] for i in w.items]
    prompt = render(tok, next_item_instruction(sids), "", 0).input_ids
    assert prompt[: len(w.input_ids)] == w.input_ids
    assert len(prompt) > len(w.input_ids)


def test_batches_cover_every_window_and_mask_padding(task):
    s = seq_stream(task)
    assert s.epoch_size == len(ORDERS) * 2  # 5 items, window 4 stride 3: [0,4) and [3,5)
    b = s.batch(range(s.epoch_size))
    assert b.input_ids.shape[0] == s.epoch_size
    assert not (b.answer_mask & (b.attention_mask == 0)).any()  # no loss on padding
    assert (b.attention_mask == 0).any()  # the short windows are padded
    assert b.n_answer_tokens == s.loss_tokens_per_epoch() == len(ORDERS) * 4 * 3  # 4 items x 3
    ex = SFTStream(s.tokenizer, task[1], tasks="next-item", align_ratio=0, titles=False, seed=0)
    assert s.tokens_per_epoch() < sum(len(ex.example(i).input_ids) for i in range(ex.epoch_size))


def item_nll(model, ids: list[int], span: tuple[int, int]) -> torch.Tensor:
    """Reference: -sum log p of ids[span] given everything before, one forward pass."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0]  # (T, V)
    logp = torch.log_softmax(logits.double(), dim=-1)  # (T, V)
    return -sum(logp[t - 1, ids[t]] for t in range(*span))


def test_per_position_loss_equals_the_per_example_loss_on_the_same_prefixes(world, task):
    """float64. Each labelled item's summed loss in the packed, padded batch equals the loss
    of its own example "history = the window's items before it, target = it", computed by
    a separate forward pass on just that prefix. Today's prompts wrap the history in a chat
    turn and an instruction after it, so the reference example here is written in the
    sequence layout (prefix, SIDs joined by the separator, then the target's SID); it is
    not today's prompt, whose answer follows the instruction."""
    model = AutoModelForCausalLM.from_pretrained(world.init, dtype=torch.float64).eval()
    s = seq_stream(task)
    b = s.batch(range(s.epoch_size))
    with torch.no_grad():
        _, token_losses = AnswerLoss(model)(b.input_ids, b.attention_mask, b.answer_mask)
    got = iter(token_losses.tolist())  # row-major: window by window, item by item
    n_items = 0
    for i in range(s.epoch_size):
        w = s.window(i)
        for k in range(w.first_labelled, len(w.items)):
            start, end = w.item_spans[k]
            ids = list(w.input_ids[:end])  # prefix + items before k + item k
            want = item_nll(model, ids, (start, end))
            assert sum(next(got) for _ in range(start, end)) == pytest.approx(
                float(want), abs=1e-10
            )
            n_items += 1
    assert next(got, None) is None and n_items == len(ORDERS) * 4


def test_sequence_needs_no_prefix_or_separator(task):
    tok, data = task
    w = seq_stream(task, prefix="", separator="").windows[0]
    start = list(tok("")["input_ids"])  # the tokenizer's own start tokens (BOS), if any
    assert list(w.input_ids) == start + [t for i in w.items for t in data.tokens_of[i]]


def test_bf16_resolution():
    assert use_bf16(SFTConfig(bf16="on"), torch.device("cpu"))
    assert not use_bf16(SFTConfig(bf16="off"), torch.device("cpu"))
    assert not use_bf16(SFTConfig(dtype="float64"), torch.device("cpu"))  # auto, float64


def test_cpu_bf16_reads_the_cpu_flags(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("flags\t\t: fpu sse avx512f amx_bf16 amx_tile\n")
    assert cpu_has_bf16(info)
    info.write_text("flags\t\t: fpu sse avx512f avx2\n")
    assert not cpu_has_bf16(info)
    assert not cpu_has_bf16(tmp_path / "missing")


@pytest.mark.skipif(not cpu_has_bf16(), reason="the CPU has neither avx512_bf16 nor AMX")
def test_bf16_autocast_loss_stays_within_its_rounding_bound(world, task):
    """bf16 autocast against float32 on the same packed batch. Autocast rounds each
    matmul's inputs to bfloat16 (8-bit significand: unit roundoff u = 2^-8) and sums in
    float32, so each matmul adds a relative error of at most ~2u (both inputs rounded).
    The tiny model's logits pass n = 2 layers x 7 matmuls + the head = 15 matmuls in
    series; to first order the relative errors add, |d logit| <= 2 n u max|logit|, and a
    cross-entropy term (log-sum-exp minus a logit) moves by at most 2 max|d logit|, as
    does their mean: bound 4 n u max|logit| (~0.23 max|logit|)."""
    model = AutoModelForCausalLM.from_pretrained(world.init, dtype=torch.float32).eval()
    s = seq_stream(task)
    b = s.batch(range(s.epoch_size))
    loss = AnswerLoss(model)
    means = {}
    for bf16 in (False, True):
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            total, _ = loss(b.input_ids, b.attention_mask, b.answer_mask)
        means[bf16] = float(total) / b.n_answer_tokens
    with torch.no_grad():
        max_logit = float(model(input_ids=b.input_ids).logits.abs().max())
    u, n = 2.0**-8, 15
    assert means[True] != means[False]  # autocast really ran in bfloat16
    assert abs(means[True] - means[False]) <= 4 * n * u * max_logit
