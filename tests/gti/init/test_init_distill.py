"""Token distillation as a grounding objective (gti.init.distill): zero exactly when the
student's context computes what the teacher's does, the loss an independent computation
gives, gradient into the new rows only, and a planted case it learns."""

from __future__ import annotations

import copy
import json

import pytest
import torch
import torch.nn.functional as F
from initworld import TEXTS, make_model, make_sids, make_tokenizer
from test_init_cli import OWN_FILES, gti_init

from gti.init import InitContext
from gti.init.config import GroundingConfig
from gti.init.distill import (
    CONTEXTS,
    DistillStream,
    distill_loss,
    next_token_logprobs,
    pair_example,
    prompt_of,
)
from gti.init.grounding import NewRows, SharedPrefix, freeze
from gti.init.pairs import PairStream
from gti.init.run import apply_row_init
from gti.init.trainer import train_grounding
from gti.prompts import sid_strings
from gti.vocab import extend_vocabulary

# One-token texts the tiny tokenizer knows, and one-token "SIDs" (level a and b codes):
# with a new row set to its text's embedding, the student reads what the teacher reads.
WORDS = ["toy", "story", "drama", "comedy", "thriller", "crime", "war"]
CODES = ["<a_0>", "<a_1>", "<a_2>", "<a_3>", "<b_0>", "<b_1>", "<b_2>"]


def setup(chat: bool, *, tied: bool = True, dtype=None):
    tok = make_tokenizer(chat)
    model = make_model(tok, tied=tied)
    if dtype is not None:
        model.to(dtype)
    sids = make_sids()
    ext = extend_vocabulary(model, tok, sids)
    apply_row_init(model, ext, "random", torch.Generator().manual_seed(0), InitContext())
    freeze(model)
    return tok, model, ext, sids, NewRows(model, ext)


def word_stream(tok, rows, batch_size=len(WORDS)) -> DistillStream:
    return DistillStream(tok, WORDS, CODES, rows.slot, batch_size=batch_size, seed=0)


def plant(tok, model, rows) -> torch.Tensor:
    """(n_words, d) the planted optimum: each code's row = its word's embedding."""
    word_ids = tok.convert_tokens_to_ids(WORDS)
    assert tok.unk_token_id not in word_ids
    return model.get_input_embeddings().weight.detach()[word_ids]


def code_slots(tok, rows) -> torch.Tensor:
    return rows.slot[torch.tensor(tok.convert_tokens_to_ids(CODES))]


def shared_of(model, stream):
    prefix = stream.common_prefix()
    return SharedPrefix(model, prefix) if prefix else None


@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize(("target", "layer"), [("hidden", -1), ("hidden", 1), ("logits", -1)])
def test_zero_when_the_student_reads_what_the_teacher_reads(chat, target, layer):
    tok, model, ext, sids, rows = setup(chat, dtype=torch.float64)
    stream = word_stream(tok, rows)
    batch = stream.batch(0)
    assert (batch.n_suffix >= 5).all()  # the context after the item: what is matched
    kw = {"target": target, "layer": layer, "shared": shared_of(model, stream)}
    before = distill_loss(model, rows, batch, **kw).loss
    assert before > 1e-6  # random rows: the student reads something else
    with torch.no_grad():
        rows.inp[code_slots(tok, rows)] = plant(tok, model, rows)
    out = distill_loss(model, rows, batch, **kw)
    assert out.position_losses.shape == (int(batch.n_suffix.sum()),)
    torch.testing.assert_close(out.loss, torch.zeros((), dtype=torch.float64), rtol=0, atol=1e-12)
    with torch.no_grad():  # one code off its word: positive again
        rows.inp[code_slots(tok, rows)[0]] += 0.1
    assert distill_loss(model, rows, batch, **kw).loss > 1e-8


def reference_loss(model, rows, tok, contexts, texts, codes, keys, target, layer):
    """The loss by hand: each sequence alone through the full model (new rows written into
    a copy), suffix = what follows the student's last new token; torch's MSE or KL."""
    ref = copy.deepcopy(model)
    rows.write_back(ref)
    new = set(rows.ids.tolist())
    t_states, s_states = [], []
    for item, context in keys:
        teacher = prompt_of(tok, contexts[context].format(item=texts[item]))
        student = prompt_of(tok, contexts[context].format(item=codes[item]))
        n = len(student) - 1 - max(i for i, t in enumerate(student) if t in new)
        assert teacher[-n:] == student[-n:]
        for seq, out in ((teacher, t_states), (student, s_states)):
            with torch.no_grad():
                res = ref(input_ids=torch.tensor([seq]), output_hidden_states=True)
            out.append(
                res.logits[0, -n:] if target == "logits" else res.hidden_states[layer][0, -n:]
            )
    t, s = torch.cat(t_states), torch.cat(s_states)
    if target == "hidden":
        return F.mse_loss(s, t)
    old = (rows.slot < 0).nonzero().squeeze(1)
    log_t, log_s = (F.log_softmax(x[:, old], dim=-1) for x in (t, s))
    return F.kl_div(log_s, log_t, log_target=True, reduction="batchmean")


@pytest.mark.numerics
@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize(("target", "layer"), [("hidden", -1), ("hidden", 1), ("logits", -1)])
def test_loss_equals_an_independent_computation(chat, target, layer):
    """float64, so the routes differ only by summation order (batching, padding, the
    frozen-prefix cache): 1e-10 is far above that and far below any real difference."""
    tok, model, ext, sids, rows = setup(chat, dtype=torch.float64)
    codes = sid_strings(sids, list(sids.items))
    # contexts whose item is followed by a line break: no token merges across its edge,
    # so the suffix is what follows the student's last new token (the reference's rule)
    contexts = (CONTEXTS[0], CONTEXTS[2])
    stream = DistillStream(tok, TEXTS, codes, rows.slot, batch_size=6, seed=0, contexts=contexts)
    batch = stream.batch(1)
    assert batch.student.lengths.unique().numel() > 1  # padding in the batch
    keys = [stream.key(i) for i in range(6, 12)]
    got = distill_loss(
        model, rows, batch, target=target, layer=layer, shared=shared_of(model, stream)
    ).loss
    want = reference_loss(model, rows, tok, contexts, TEXTS, codes, keys, target, layer)
    assert got > 0
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    ("tied", "objective", "target"),
    [(True, "distill", "hidden"), (True, "ce+distill", "logits"), (False, "distill", "hidden")],
)
def test_gradient_reaches_only_the_new_rows(tied, objective, target):
    tok, model, ext, sids, rows = setup(True, tied=tied)
    codes = sid_strings(sids, list(sids.items))
    stream = PairStream(tok, TEXTS, codes, rows.slot, batch_size=6, seed=0)
    distill = DistillStream(tok, TEXTS, codes, rows.slot, batch_size=6, seed=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    start = {k: v.detach().clone() for k, v in rows.named_parameters()}
    cfg = GroundingConfig(
        steps=2, batch_size=6, progress=False, objective=objective, distill_target=target
    )
    result = train_grounding(model, rows, stream, cfg, distill=distill)
    assert result.completed
    assert all(p.grad is None for p in model.parameters())
    for k, v in model.state_dict().items():  # every model tensor, bit for bit
        assert torch.equal(v, before[k]), k
    assert not torch.equal(rows.inp, start["inp"])
    if not tied:  # distillation trains input rows; the head's move only with ce
        assert torch.equal(rows.out, start["out"]) == (objective == "distill")
    rows.write_back(model)
    new = torch.zeros(model.get_input_embeddings().weight.shape[0], dtype=torch.bool)
    new[rows.ids] = True
    for k, v in model.state_dict().items():
        if k in ("model.embed_tokens.weight", "lm_head.weight"):
            assert torch.equal(v[~new], before[k][~new]), k  # original rows unchanged


def test_a_few_steps_learn_the_planted_rows():
    """Distillation alone, from random rows: the loss on all items falls, and the rows
    turn toward the planted optimum (each code at its word's embedding). Direction, not
    distance: the first layer's RMSNorm reads a row's direction, so Adam's steps grow
    the norm freely (measured: cosine -0.04 -> 0.68, norm 0.6 -> 1.3 in 30 steps)."""
    tok, model, ext, sids, rows = setup(True)
    stream = word_stream(tok, rows)
    full = stream.batch(0)  # every item once
    shared = shared_of(model, stream)
    slots, target = code_slots(tok, rows), plant(tok, model, rows)

    def measure():
        with torch.no_grad():
            loss = distill_loss(model, rows, full, shared=shared).loss
        return float(loss), float(F.cosine_similarity(rows.inp.detach()[slots], target).mean())

    loss0, cos0 = measure()
    pairs = PairStream(tok, WORDS, CODES, rows.slot, batch_size=7, seed=0)  # unused by distill
    cfg = GroundingConfig(steps=30, batch_size=7, lr=1e-2, progress=False, objective="distill")
    log = train_grounding(model, rows, pairs, cfg, distill=stream).log
    loss1, cos1 = measure()
    assert loss1 < 0.1 * loss0
    assert cos0 < 0.1 and cos1 > 0.5
    assert all(e["ce"] is None and e["loss"] == e["distill"] for e in log)


def test_a_token_merged_across_the_span_edge_is_not_matched():
    """Word-level pieces: a text ending in "." before the context's "." reads ".." (one
    token); the student's "." stays alone. The shared suffix starts after both."""
    tok, model, ext, sids, rows = setup(False)
    context = "A user is looking at {item}. Who would enjoy it?"
    ex = pair_example(tok, context, "Seven (1995). Genres: Crime.", "<a_0><b_0><c_0>", rows.slot)
    assert ex.n_suffix == 5  # "who would enjoy it ?" (words the tiny vocabulary may not know)
    assert tok.convert_ids_to_tokens(ex.student[-6]) == "."  # alone: in the student's span
    assert ex.teacher[-6] == tok.unk_token_id  # ".." : one piece, unknown to the vocabulary
    assert ex.teacher[-5:] == ex.student[-5:]


def test_cli_distill_writes_the_checkpoint_and_records_the_objective(world):
    out = world.root / "runs" / "distill"
    res = gti_init(
        world,
        out,
        "--strategy",
        "gti",
        "--objective",
        "distill",
        "--preset",
        "tiny",
        "--no-progress",
    )
    assert res.exit_code == 0, res.output
    files = {p.name for p in out.iterdir()}
    assert OWN_FILES | {"train_log.jsonl", "model.safetensors"} <= files
    config = json.loads((out / "init_config.json").read_text())
    grounding = config["grounding"]
    assert grounding["objective"] == "distill" and grounding["distill_target"] == "hidden"
    assert grounding["distill_layer"] == -1 and grounding["distill_weight"] == 1.0
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in log] == [1, 2, 3, 4]
    assert all(e["distill"] > 0 and e["distill_positions"] > 0 for e in log)


def test_logit_distillation_ranges_over_the_original_tokens_only():
    """A padded vocabulary (--pad-vocab-to-multiple-of): its zero rows past the tokenizer are
    no token, so the distributions matched are over the base vocabulary alone."""
    tok = make_tokenizer()
    model = make_model(tok)
    ext = extend_vocabulary(model, tok, make_sids(), pad_to_multiple_of=64)
    freeze(model)
    rows = NewRows(model, ext)
    assert model.get_output_embeddings().weight.shape[0] > len(tok)  # padding rows exist
    hidden = torch.randn(3, model.config.hidden_size, generator=torch.Generator().manual_seed(0))
    logp = next_token_logprobs(model, rows, hidden)
    assert logp.shape == (3, ext.base_vocab_size)
    torch.testing.assert_close(logp.exp().sum(-1), torch.ones(3))
