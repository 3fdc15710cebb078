"""LLaMA-Factory's inits against their procedure replayed on a whole matrix (noise_init)
and against the tokenizer + numpy (desc_init)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from initworld import TEXTS, make_sids, make_tokenizer
from safetensors.numpy import load_file
from test_init_cli import gti_init
from test_init_strategies import call, old_rows

from geodiag.errors import InputError
from gti.init import InitContext


def test_noise_init_replays_their_procedure_draw_for_draw():
    """Their ``_noisy_mean_initialization`` on a resized matrix (the tail-slice branch), with
    the global generator seeded as ours: the same rows, bit for bit."""
    old = old_rows(V=50, d=16).float()
    n_new = 7
    torch.manual_seed(11)
    weight = torch.cat([old, torch.zeros(n_new, 16)])  # (V + n_new, d), resized
    avg = weight[:-n_new].mean(dim=0, keepdim=True)
    noise = torch.empty_like(weight[-n_new:])
    noise.normal_(mean=0, std=1.0 / math.sqrt(16))
    weight[-n_new:] = avg + noise
    rows = call("llamafactory-noise", old, n_new, seed=11)
    assert rows.dtype == old.dtype and torch.equal(rows, weight[-n_new:])


def test_noise_init_is_the_mean_plus_noise_of_variance_one_over_d():
    d, n_new = 256, 64
    old = old_rows(V=100, d=d)
    noise = call("llamafactory-noise", old, n_new, seed=3).numpy() - old.numpy().mean(0)
    # the mean of n entries of variance v has standard error sqrt(v / n); their variance
    # estimate has standard error v sqrt(2 / n)
    assert abs(float((noise**2).mean()) * d - 1) < 4 * np.sqrt(2 / noise.size)
    assert abs(float(noise.mean())) < 4 / np.sqrt(d * noise.size)


def world_context(old_input: torch.Tensor) -> tuple[InitContext, int]:
    tok = make_tokenizer()
    sids = make_sids()
    texts = {f"m{i}": t for i, t in enumerate(TEXTS)}
    ctx = InitContext(sids=sids, item_texts=texts, tokenizer=tok, input_rows=old_input)
    return ctx, sum(lv.size for lv in sids.levels)


def expected_desc(ctx: InitContext, inputs: np.ndarray, own: np.ndarray) -> np.ndarray:
    """Per (level, code): the texts of its items, one per line, tokenized without special
    tokens; the mean of the input rows of those ids, else the mean of ``own``."""
    rows = []
    for li, level in enumerate(ctx.sids.levels):
        for code in range(level.size):
            text = "\n".join(ctx.item_texts[i] for i, c in ctx.sids.items.items() if c[li] == code)
            ids = ctx.tokenizer(text, add_special_tokens=False)["input_ids"] if text else []
            rows.append(inputs[ids].mean(axis=0) if ids else own.mean(axis=0))
    return np.array(rows)


def test_desc_init_equals_the_tokenizer_and_numpy():
    inputs = old_rows(V=len(make_tokenizer()), d=6)
    ctx, n_new = world_context(inputs)
    rows = call("llamafactory-desc", inputs, n_new, context=ctx)
    want = expected_desc(ctx, inputs.numpy(), inputs.numpy())
    np.testing.assert_allclose(rows.numpy(), want, rtol=1e-12, atol=1e-12)
    assert np.allclose(rows.numpy()[3], inputs.numpy().mean(0))  # <a_3>: no item carries it
    # not description-mean: that one averages per item first (items of unequal length)
    ctx.matrix = "input"
    other = call("description-mean", inputs, n_new, context=ctx)
    assert not np.allclose(rows.numpy()[:3], other.numpy()[:3], atol=1e-6)


def test_desc_init_fills_an_untied_head_from_the_input_rows():
    inputs = old_rows(V=len(make_tokenizer()), d=6)
    head = old_rows(V=len(inputs), d=6, seed=1)  # the untied output head's own rows
    ctx, n_new = world_context(inputs)
    ctx.matrix = "output"
    rows = call("llamafactory-desc", head, n_new, context=ctx)
    want = expected_desc(ctx, inputs.numpy(), head.numpy())
    np.testing.assert_allclose(rows.numpy(), want, rtol=1e-12, atol=1e-12)


def test_desc_noise_adds_noise_of_variance_one_over_d():
    d = 512
    inputs = old_rows(V=len(make_tokenizer()), d=d)
    ctx, n_new = world_context(inputs)
    base = call("llamafactory-desc", inputs, n_new, context=ctx).numpy()
    noisy = call("llamafactory-desc-noise", inputs, n_new, seed=5, context=ctx).numpy()
    noise = noisy - base
    assert abs(float((noise**2).mean()) * d - 1) < 4 * np.sqrt(2 / noise.size)
    again = call("llamafactory-desc-noise", inputs, n_new, seed=5, context=ctx).numpy()
    assert np.array_equal(noisy, again)


def test_a_users_descriptions_go_over_the_items_texts():
    inputs = old_rows(V=len(make_tokenizer()), d=6)
    ctx, n_new = world_context(inputs)
    ctx.new_tokens = ctx.sids.token_strings()
    ctx.descriptions = {"<a_3>": "Comedy Drama", "<b_0>": "Thriller."}
    rows = call("llamafactory-desc", inputs, n_new, context=ctx).numpy()
    want = expected_desc(ctx, inputs.numpy(), inputs.numpy())
    table = inputs.numpy()
    for token, text in ctx.descriptions.items():
        ids = ctx.tokenizer(text, add_special_tokens=False)["input_ids"]
        want[ctx.new_tokens.index(token)] = table[ids].mean(axis=0)
    np.testing.assert_allclose(rows, want, rtol=1e-12, atol=1e-12)
    ctx.descriptions = {"<think>": "reasoning"}
    with pytest.raises(InputError, match="--descriptions"):
        call("llamafactory-desc", inputs, n_new, context=ctx)


def test_cli_reads_a_llamafactory_descriptions_file(world):
    yaml_file = world.root / "tokens.yaml"
    yaml_file.write_text("'<a_3>': Comedy Drama\n")
    out = world.root / "described"
    res = gti_init(world, out, "--strategy", "llamafactory-desc", "--descriptions", yaml_file)
    assert res.exit_code == 0, res.output
    base = load_file(world.model_dir / "model.safetensors")["model.embed_tokens.weight"]
    weight = load_file(out / "model.safetensors")["model.embed_tokens.weight"]
    ids = make_tokenizer()("Comedy Drama", add_special_tokens=False)["input_ids"]
    np.testing.assert_allclose(weight[len(base) + 3], base[ids].mean(axis=0), rtol=1e-6)
    assert json.loads((out / "init_config.json").read_text())["descriptions"] == str(yaml_file)
    bad = world.root / "bad.yaml"
    bad.write_text("- a list\n")
    res = gti_init(
        world, world.root / "bad", "--strategy", "llamafactory-desc", "--descriptions", bad
    )
    assert res.exit_code == 2 and "--descriptions" in res.output
