"""SFT training on the tiny world: it learns, it resumes exactly, accumulation and
freezing do what they say."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from gti.sft.config import SFTConfig
from gti.sft.run import run_sft
from gti.sft.trainer import SFTInterrupted


def config(world, out, **kw) -> SFTConfig:
    base = dict(
        init=world.init, out=out, steps=8, batch_size=4, micro_batch_size=4, lr=3e-3,
        warmup_steps=1, k_core=1, max_history=3, save_every=100, progress=False, device="cpu",
    )  # fmt: skip
    return SFTConfig(**{**base, **kw})


def train_log(out) -> list[dict]:
    return [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]


def weights(out) -> dict[str, torch.Tensor]:
    return load_file(out / "model.safetensors")


def test_loss_decreases_when_overfitting(world, tmp_path):
    out = run_sft(config(world, tmp_path / "sft", steps=40, min_lr_ratio=1.0))
    losses = [e["loss"] for e in train_log(out)]
    assert len(losses) == 40
    first, last = sum(losses[:4]) / 4, sum(losses[-4:]) / 4
    assert last < 0.5 * first, (first, last)


def test_resume_after_a_kill_equals_an_uninterrupted_run(world, tmp_path):
    straight = run_sft(config(world, tmp_path / "straight", save_every=3))
    out = tmp_path / "resumed"
    cfg = config(world, out, save_every=3)
    with pytest.raises(SFTInterrupted) as stop:
        run_sft(cfg, should_stop=lambda step: step == 5)  # saves at 3 and on stopping at 5
    assert stop.value.step == 5 and not out.exists()
    assert (tmp_path / "resumed.partial" / "state" / "trainer_state.json").is_file()
    run_sft(cfg)
    assert not (tmp_path / "resumed.partial").exists()
    a, b = weights(straight), weights(out)
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-6)
    strip = lambda log: [{k: v for k, v in e.items() if k != "seconds"} for e in log]  # noqa: E731
    la, lb = strip(train_log(straight)), strip(train_log(out))
    assert len(la) == len(lb) == 8
    for x, y in zip(la, lb, strict=True):
        assert x == pytest.approx(y)


def test_resume_refuses_other_settings(world, tmp_path):
    out = tmp_path / "sft"
    with pytest.raises(SFTInterrupted):
        run_sft(config(world, out), should_stop=lambda step: step == 2)
    from geodiag.errors import InputError

    with pytest.raises(InputError, match="lr"):
        run_sft(config(world, out, lr=1e-2))


def test_accumulation_equals_one_big_batch(world, tmp_path):
    one = run_sft(config(world, tmp_path / "one", steps=3))
    acc = run_sft(config(world, tmp_path / "acc", steps=3, micro_batch_size=1))
    la, lb = train_log(one), train_log(acc)
    assert [e["loss"] for e in la] == pytest.approx([e["loss"] for e in lb], abs=1e-5)
    a, b = weights(one), weights(acc)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-5)


def test_freezing_the_layers_trains_only_the_embeddings(world, tmp_path):
    out = run_sft(config(world, tmp_path / "sft", steps=2, freeze=("layers",)))
    before, after = weights(world.init), weights(out)
    for k in before:
        same = torch.equal(before[k], after[k])
        assert same == ("embed_tokens" not in k), k


def test_lcrec_mix_logs_every_task(world, tmp_path):
    out = run_sft(config(world, tmp_path / "sft", steps=6, tasks="lcrec", align_ratio=0.5))
    keys = set().union(*train_log(out))
    assert {"loss_next_item", "loss_text_to_sid", "loss_sid_to_text"} <= keys
