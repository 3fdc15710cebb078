"""Grounding: fast gradients equal the naive route's; only the new rows move."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch
from initworld import TEXTS, make_model, make_sids, make_tokenizer

from gti.init import InitContext
from gti.init.config import GroundingConfig
from gti.init.grounding import (
    FrozenPrefix,
    NewRows,
    SharedPrefix,
    answer_loss,
    answer_tokens,
    fast_loss,
    freeze,
    frozen_prefix,
    padded_cost,
    row_groups,
    row_splits,
    suffix_hidden,
)
from gti.init.pairs import PairStream
from gti.init.run import apply_row_init
from gti.init.trainer import train_grounding
from gti.prompts import SID_TO_TEXT, TEXT_TO_SID, sid_strings
from gti.vocab import extend_vocabulary

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
from _naive_grounding import make_naive_trainable, naive_loss  # noqa: E402  (not in the wheel)

# The fast route's gradient is checked against the naive one in float64, where the two
# differ only by summation order: an element of the loss or of the gradient is a sum of
# at most B * T * d = 8 * 44 * 64 ~ 2e4 products of O(1) factors, and reordering such a
# sum changes it by at most ~2e4 * eps64 (1.1e-16) ~ 2.5e-12. EQUIV_ATOL = 1e-10 is 40
# times that; the relative part covers larger elements. In float32 the same bound is
# ~2.5e-3, larger than many gradient elements: a float32 comparison could only be tuned.
EQUIV_RTOL, EQUIV_ATOL = 1e-9, 1e-10


def setup(tied: bool, chat: bool, start: str = "random", batch_size: int = 8, dtype=None):
    tok = make_tokenizer(chat)
    model = make_model(tok, tied=tied)
    if dtype is not None:
        model.to(dtype)
    sids = make_sids()
    ext = extend_vocabulary(model, tok, sids)
    # random, not mean: with identical new rows some gradient terms cancel by symmetry
    apply_row_init(model, ext, start, torch.Generator().manual_seed(0), InitContext())
    freeze(model)
    rows = NewRows(model, ext)
    stream = PairStream(
        tok, TEXTS, sid_strings(sids, list(sids.items)), rows.slot, batch_size=batch_size, seed=0
    )
    return tok, model, ext, rows, stream


def test_templates_cover_both_directions():
    assert len(set(TEXT_TO_SID)) >= 4 and len(set(SID_TO_TEXT)) >= 4
    assert all("{text}" in t for t in TEXT_TO_SID) and all("{sid}" in t for t in SID_TO_TEXT)


@pytest.mark.parametrize("chat", [False, True])
def test_loss_covers_exactly_the_answer(chat):
    tok, model, ext, rows, stream = setup(True, chat)
    ex = stream.example((0, 0, 1))  # item 0, text -> SID, template 1
    answer = list(ex.input_ids[ex.answer_start :])
    sid_ids = tok("<a_0><b_0><c_0>", add_special_tokens=False)["input_ids"]
    end = tok.convert_tokens_to_ids("<|im_end|>") if chat else tok.eos_token_id
    assert answer == sid_ids + [end]
    prompt = tok.decode(ex.input_ids[: ex.answer_start])
    assert "semantic id" in prompt.lower() and "toy" in prompt.lower()
    if chat:
        squeezed = prompt.replace(" ", "")
        assert squeezed.startswith("<|im_start|>system") and squeezed.endswith(
            "<|im_start|>assistant"
        )
    back = stream.example((0, 1, 0))  # SID -> text: the SID is in the prompt
    assert set(sid_ids) <= set(back.input_ids[: back.answer_start])
    assert "toy" in tok.decode(back.input_ids[back.answer_start :]).lower()


@pytest.mark.numerics
@pytest.mark.parametrize(("tied", "chat"), [(True, False), (True, True), (False, True)])
def test_fast_gradient_equals_naive(tied, chat):
    tok, model, ext, rows, stream = setup(tied, chat, dtype=torch.float64)
    batch = stream.batch(0)
    assert batch.lengths.unique().numel() > 1  # padding in the batch
    assert set(batch.direction.tolist()) == {0, 1}  # both directions
    assert (batch.first_new > 0).all()  # a frozen prefix exists in every row
    assert len(row_groups(batch)) == 2  # fast_loss runs two row groups (part 4)

    naive = copy.deepcopy(model)
    params = make_naive_trainable(naive, ext)
    loss_naive = naive_loss(naive, batch)
    loss_naive.backward()
    ids = rows.ids
    assert params[0].grad[: ext.base_vocab_size].abs().max() == 0  # the mask works

    prefix = stream.common_prefix()  # chat: system turn + user header; plain: none
    assert len(prefix) >= 10 if chat else not prefix
    shared = SharedPrefix(model, prefix) if prefix else None
    assert shared is None or shared.matches(batch.input_ids)
    dim, device = rows.inp.shape[1], rows.ids.device
    prefixes = {  # each frozen-prefix route through the same parts as fast_loss
        "none": FrozenPrefix.none(batch, dim, device),
        "per-batch": frozen_prefix(model, batch, device, None),
        "shared": frozen_prefix(model, batch, device, shared),
    }
    assert prefixes["per-batch"].width > 0
    for name in (*prefixes, "fast_loss"):
        rows.zero_grad()
        if name == "fast_loss":
            out = fast_loss(model, rows, batch, shared=shared)
        else:
            hidden = suffix_hidden(model, rows, batch, prefixes[name])
            answers = answer_tokens(batch, prefixes[name])
            out = answer_loss(rows.project(model, hidden[answers.row, answers.col]), answers)
        out.loss.backward()
        assert out.loss.dtype == rows.inp.grad.dtype == torch.float64
        tol = {"rtol": EQUIV_RTOL, "atol": EQUIV_ATOL}
        torch.testing.assert_close(out.loss, loss_naive, **tol)
        torch.testing.assert_close(rows.inp.grad, params[0].grad[ids], **tol)
        if not tied:
            torch.testing.assert_close(rows.out.grad, params[1].grad[ids], **tol)
    assert rows.inp.grad.abs().max() > 0


@pytest.mark.parametrize("tied", [True, False])
def test_grounding_moves_only_the_new_rows(tied):
    tok, model, ext, rows, stream = setup(tied, True, start="mean")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    start_rows = rows.inp.detach().clone()
    cfg = GroundingConfig(steps=3, batch_size=8, progress=False)
    result = train_grounding(model, rows, stream, cfg)
    assert result.completed and len(result.log) == 3
    assert all(p.grad is None for p in model.parameters())
    for k, v in model.state_dict().items():  # every model tensor, bit for bit
        assert torch.equal(v, before[k]), k
    assert not torch.equal(rows.inp, start_rows)
    assert rows.inp.detach().std(0).sum() > 0  # the mean init's identical rows now differ

    rows.write_back(model)
    after = model.state_dict()
    new = torch.zeros(after["model.embed_tokens.weight"].shape[0], dtype=torch.bool)
    new[rows.ids] = True
    for k, v in after.items():
        if k in ("model.embed_tokens.weight", "lm_head.weight"):
            assert torch.equal(v[~new], before[k][~new]), k  # original rows unchanged
            assert not torch.equal(v[new], before[k][new]), k
        else:
            assert torch.equal(v, before[k]), k


def test_bf16_autocast_stays_within_its_rounding_bound():
    """bf16 autocast against float32 on the same batch. Autocast rounds each matmul's
    inputs to bfloat16 (8-bit significand: unit roundoff u = 2^-8) and accumulates in
    float32, so each matmul adds a relative error of at most ~2u. The tiny model's
    logits pass through n = 2 layers x 7 matmuls + the head = 15 matmuls in series;
    to first order the relative errors add: |d logits| <= 2 n u max|logits|, and the
    cross-entropy moves by at most max |d logits|. The gradient passes the same
    matmuls twice (forward and backward): relative error <= 4 n u."""
    tok, model, ext, rows, stream = setup(True, True)
    batch = stream.batch(0)
    u, n = 2.0**-8, 15
    results = {}
    for bf16 in (False, True):
        rows.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = fast_loss(model, rows, batch, shared=None)
        out.loss.backward()
        results[bf16] = (out.loss.detach(), rows.inp.grad.clone())
    (l32, g32), (l16, g16) = results[False], results[True]
    with torch.no_grad():
        max_logit = float((model(input_ids=batch.input_ids).logits).abs().max())
    assert l16 != l32  # autocast really ran in bfloat16
    assert abs(float(l16 - l32)) <= 2 * n * u * max_logit
    assert float((g16 - g32).norm() / g32.norm()) <= 4 * n * u


@pytest.mark.parametrize("chat", [False, True])
def test_row_groups_partition_the_batch_and_never_cost_more(chat):
    *_, stream = setup(True, chat, batch_size=16)
    for step in range(6):
        batch = stream.batch(step)
        groups = row_groups(batch)
        rows = torch.cat(groups)
        assert sorted(rows.tolist()) == list(range(16))  # every row exactly once
        split = row_splits(batch)
        cost = sum(padded_cost(batch.lengths[g], split[g]) for g in groups)
        assert cost <= padded_cost(batch.lengths, split)
        for g in groups:  # a group's batch is cut to its own longest row
            sub = batch.select(g)
            assert sub.input_ids.shape[1] == int(batch.lengths[g].max())
            assert torch.equal(sub.input_ids, batch.input_ids[g, : sub.input_ids.shape[1]])


def test_gradient_checkpointing_gives_the_same_rows():
    """--gradient-checkpointing: the layers are replayed in the backward and every row runs
    whole (no frozen-prefix cache); SGD keeps the comparison linear in the gradients, whose
    routes agree to EQUIV_ATOL (float64, above), so after ``steps`` steps of ``lr`` the rows
    agree to steps x lr x EQUIV_ATOL."""
    steps, lr = 3, 0.1
    trained, replays = {}, {}
    for on in (False, True):
        tok, model, ext, rows, stream = setup(True, True, dtype=torch.float64)
        calls = []  # an MLP started inside the backward: its layer was checkpointed, replayed
        model.model.layers[0].mlp.register_forward_pre_hook(
            lambda *_, calls=calls: calls.append(torch._C._current_graph_task_id() != -1)
        )
        cfg = GroundingConfig(
            steps=steps,
            batch_size=8,
            lr=lr,
            optimizer="sgd",
            progress=False,
            gradient_checkpointing=on,
        )
        assert train_grounding(model, rows, stream, cfg).completed
        trained[on], replays[on] = rows.inp.detach().clone(), sum(calls)
        assert not any(getattr(m, "gradient_checkpointing", False) for m in model.modules())
        assert not model.training and not any(m.training for m in model.modules())
    assert replays[False] == 0 and replays[True] >= steps
    torch.testing.assert_close(trained[True], trained[False], rtol=0, atol=steps * lr * EQUIV_ATOL)
