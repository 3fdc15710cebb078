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
from gti.evaluate.decode import exact_scores_batch
from gti.evaluate.layout import PromptLayout, layout_of, next_item_prompts, sequence_prompt_ids
from gti.evaluate.trie import SidTrie
from gti.prompts import next_item_instruction, pad_id_of, render
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


def test_evaluation_prompt_is_the_window_before_the_item(task):
    """The sequence layout's evaluation prompt of "history = the window's items before k"
    is token for token the window before item k's SID, for every labelled item of every
    window (each window starts with the prefix)."""
    tok, data = task
    s = seq_stream(task)
    assert s.epoch_size == 2 * len(ORDERS)
    for w in s.windows:
        for k in range(w.first_labelled, len(w.items)):
            hist = [data.tokens_of[i] for i in w.items[:k]]
            got = sequence_prompt_ids(tok, hist, PREFIX, SEP)
            assert got == list(w.input_ids[: w.item_spans[k][0]])


def test_exact_score_is_the_log_probability_training_optimises(world, task):
    """float64. Exact full-catalog scoring of the sequence prompt gives the target item
    the negative of the loss the packed window puts on it: evaluation asks the question
    training answered."""
    tok, data = task
    model = AutoModelForCausalLM.from_pretrained(world.init, dtype=torch.float64).eval()
    trie = SidTrie.build(load(world.init))
    w = next(w for w in seq_stream(task).windows if w.first_labelled == 1)
    prompts, wants, targets = [], [], []
    for k in range(1, len(w.items)):
        prompts.append(
            sequence_prompt_ids(tok, [data.tokens_of[i] for i in w.items[:k]], PREFIX, SEP)
        )
        start, end = w.item_spans[k]
        wants.append(-float(item_nll(model, list(w.input_ids[:end]), (start, end))))
        targets.append(trie.item_ids.index(w.items[k]))
    scores = exact_scores_batch(model, prompts, trie, pad_id=pad_id_of(tok))  # (k, n_items)
    got = scores[torch.arange(len(targets)), torch.tensor(targets)]
    assert got.tolist() == pytest.approx(wants, abs=1e-9)


def test_a_sequence_checkpoint_is_evaluated_in_its_layout(world, tmp_path):
    """`gti evaluate` reads the layout off sft_config.json: a sequence-trained checkpoint
    is ranked on packed-history prompts, and its figures equal ranking those prompts
    directly; an init checkpoint keeps the chat layout."""
    import numpy as np

    from gti.data.tasks import of_users, sample_users
    from gti.evaluate.config import EvalConfig
    from gti.evaluate.decode import rank_items
    from gti.evaluate.metrics import topk_metrics
    from gti.evaluate.run import run_evaluate
    from gti.sft.run import run_sft

    out = tmp_path / "sft"
    cfg = SFTConfig(
        init=world.init, out=out, objective="sequence", window=4, stride=3, steps=2,
        batch_size=2, micro_batch_size=2, warmup_steps=0, progress=False, dtype="float64",
        k_core=1,
    )  # fmt: skip
    run_sft(cfg)
    assert layout_of(out) == PromptLayout.of_sft(cfg)
    assert layout_of(world.init).objective == "example"

    res = run_evaluate(EvalConfig(checkpoint=out, splits=("test",), progress=False))
    assert res.settings["k_core"] == 1  # read off the run, as the layout is
    assert res.settings["prompt_layout"] == {
        "objective": "sequence", "prefix": PREFIX, "separator": SEP,
    }  # fmt: skip
    tok = AutoTokenizer.from_pretrained(out)
    sids = load(out)
    data = load_task_data(sids, world.data_spec, k_core_min=1, max_history=20)
    examples = of_users(data.splits.test, sample_users(data, None, 0))
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    trie = SidTrie.build(sids)
    prompts = next_item_prompts(tok, data, examples, layout_of(out))
    ranking = rank_items(model, prompts, trie, beams=20, pad_id=pad_id_of(tok))
    targets = np.array([trie.item_ids.index(e.target) for e in examples])
    want = topk_metrics(ranking.items.numpy(), targets, tuple(res.ks))
    assert res.splits["test"].metrics == want


def test_length_grouping_keeps_the_step_and_its_gradient(world, task):
    """Micro-batches grouped by window length hold the same windows per process as the
    plain cut, pad less, and give the same gradient (float64: each token's loss over
    the step's token count, whatever the grouping)."""
    from gti.sft.trainer import micro_batches

    s = seq_stream(task)
    cfg = SFTConfig(batch_size=8, micro_batch_size=2)
    for rank, world_size in ((0, 1), (0, 2), (1, 2)):
        plain = micro_batches(0, cfg, rank, world_size)
        grouped = micro_batches(0, cfg, rank, world_size, s.length)
        assert sorted(i for g in grouped for i in g) == [i for r in plain for i in r]
        flat = [s.length(i) for g in grouped for i in g]
        assert flat == sorted(flat)

    def padded_and_grad(groups):
        model = AutoModelForCausalLM.from_pretrained(world.init, dtype=torch.float64)
        loss = AnswerLoss(model)
        batches = [s.batch(g) for g in groups]
        n = sum(b.n_answer_tokens for b in batches)
        for b in batches:
            (loss(b.input_ids, b.attention_mask, b.answer_mask)[0] / n).backward()
        pad = sum(int((b.attention_mask == 0).sum()) for b in batches)
        return pad, torch.cat([p.grad.reshape(-1) for p in model.parameters()])

    pad_plain, g_plain = padded_and_grad(micro_batches(0, cfg, 0, 1))
    pad_grouped, g_grouped = padded_and_grad(micro_batches(0, cfg, 0, 1, s.length))
    assert pad_grouped < pad_plain
    assert torch.allclose(g_grouped, g_plain, rtol=0, atol=1e-12)
