"""SFT training on the tiny world: it learns, it resumes exactly, accumulation and
freezing do what they say."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file

from gti.errors import Interrupted
from gti.sft.config import SFTConfig
from gti.sft.run import run_sft


def config(world, out, **kw) -> SFTConfig:
    base = dict(
        init=world.init,
        out=out,
        steps=8,
        batch_size=4,
        micro_batch_size=4,
        lr=3e-3,
        warmup_steps=1,
        k_core=1,
        max_history=3,
        save_every=100,
        progress=False,
        device="cpu",
    )
    return SFTConfig(**{**base, **kw})


# Equivalence checks (accumulation, resume, 2 processes) run in float64 and allow
# EQUIV_ATOL on weights. Why that number: in float64 the compared runs differ only in
# summation order, so a gradient element differs by at most ~n * eps64 * sum|terms|
# ~ 1e3 * 1.1e-16 * O(1) ~ 1e-13. AdamW's step lr * m / (sqrt(v) + eps) is most sensitive
# to its gradient near 0, where it moves by up to lr / eps = 3e-3 / 1e-8 = 3e5 times the
# gradient difference: <= 3e-8 per step, <= 3e-7 over the 8 steps of these runs; 1e-6
# leaves a margin of 3. (In float32, eps32 = 1.2e-7, the same bound is a whole step of
# size lr: no tolerance below lr can hold across CPU kernels, which is why these tests
# do not compare float32 runs.) Losses: the weights differ by <= 3e-7, which moves the
# mean answer-token loss by <= ||grad||_1 * 3e-7, well under 1e-6 for this 2-layer model
# whose ||grad||_1 is O(1).
EQUIV_ATOL = 1e-6


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


@pytest.mark.numerics
def test_resume_after_a_kill_equals_an_uninterrupted_run(world, tmp_path):
    straight = run_sft(config(world, tmp_path / "straight", save_every=3, dtype="float64"))
    out = tmp_path / "resumed"
    cfg = config(world, out, save_every=3, dtype="float64")
    with pytest.raises(Interrupted) as stop:
        run_sft(cfg, should_stop=lambda step: step == 5)  # saves at 3 and on stopping at 5
    assert stop.value.step == 5 and not out.exists()
    assert (tmp_path / "resumed.partial" / "state" / "trainer_state.json").is_file()
    run_sft(cfg)
    assert not (tmp_path / "resumed.partial").exists()
    a, b = weights(straight), weights(out)
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == torch.float64
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=EQUIV_ATOL)
    strip = lambda log: [{k: v for k, v in e.items() if k != "seconds"} for e in log]  # noqa: E731
    la, lb = strip(train_log(straight)), strip(train_log(out))
    assert len(la) == len(lb) == 8
    for x, y in zip(la, lb, strict=True):
        assert x.keys() == y.keys()
        assert x == pytest.approx(y, rel=0, abs=EQUIV_ATOL)


@pytest.mark.numerics
def test_a_kept_state_lets_a_longer_run_continue_as_one_straight_run(world, tmp_path):
    """keep_state: the state after the last step stays beside the checkpoint; the same
    settings with more steps continue from it (only the added steps train) and end where
    one straight run of that length ends. Without it, the state is gone."""
    out = tmp_path / "grown"
    short = config(world, out, steps=5, save_every=3, dtype="float64", min_lr_ratio=1.0)
    run_sft(replace(short, keep_state=True))
    kept = json.loads((tmp_path / "grown.partial" / "state" / "trainer_state.json").read_text())
    assert kept["step"] == 5  # saved after the last step, not only at save_every's 3
    run_sft(replace(short, steps=8, keep_state=False))
    assert not (tmp_path / "grown.partial").exists()
    log = train_log(out)
    assert [e["step"] for e in log] == list(range(1, 9))
    # the lr of each step must not depend on the run's length for this to hold
    ref = run_sft(config(world, tmp_path / "ref", steps=8, dtype="float64", min_lr_ratio=1.0))
    a, b = weights(ref), weights(out)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=EQUIV_ATOL)
    assert a.keys() == b.keys()
    strip = lambda log: [{k: v for k, v in e.items() if k != "seconds"} for e in log]  # noqa: E731
    for x, y in zip(strip(train_log(ref)), strip(log), strict=True):
        assert x == pytest.approx(y, rel=0, abs=EQUIV_ATOL)


def test_resume_refuses_other_settings(world, tmp_path):
    out = tmp_path / "sft"
    with pytest.raises(Interrupted):
        run_sft(config(world, out), should_stop=lambda step: step == 2)
    from geodiag.errors import InputError

    with pytest.raises(InputError, match="lr"):
        run_sft(config(world, out, lr=1e-2))


@pytest.mark.numerics
def test_accumulation_equals_one_big_batch(world, tmp_path):
    one = run_sft(config(world, tmp_path / "one", steps=3, dtype="float64"))
    acc = run_sft(config(world, tmp_path / "acc", steps=3, micro_batch_size=1, dtype="float64"))
    la, lb = train_log(one), train_log(acc)
    assert [e["loss"] for e in la] == pytest.approx([e["loss"] for e in lb], rel=0, abs=EQUIV_ATOL)
    a, b = weights(one), weights(acc)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=EQUIV_ATOL)


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
