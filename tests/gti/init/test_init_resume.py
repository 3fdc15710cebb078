"""A grounding run stopped (cleanly or by a crash) and resumed ends with the same rows
as an uninterrupted one."""

from __future__ import annotations

from dataclasses import replace

import pytest
from safetensors.torch import load_file

from geodiag.errors import InputError
from gti.checkpoint_files import partial_dir
from gti.errors import Interrupted
from gti.init.config import GroundingConfig, InitConfig
from gti.init.run import run_init


def config(world, out, steps=6, save_every=25, **kw) -> InitConfig:
    return InitConfig(
        sids=world.sids_dir,
        out=world.root / out,
        strategy="gti",
        grounding=GroundingConfig(
            steps=steps, batch_size=5, save_every=save_every, progress=False, **kw
        ),
    )


def weights(ckpt):
    return load_file(ckpt / "model.safetensors")["model.embed_tokens.weight"]


def log_lines(ckpt):
    return (ckpt / "train_log.jsonl").read_text().splitlines()


# Exact equality, not a tolerance: the resumed run performs the very same float32
# operations in the same order as the uninterrupted one (rows, AdamW state and RNG are
# restored bit for bit; batch k is a pure function of seed and k), in one process with
# the same kernels and thread count, so there is no rounding difference to tolerate.
@pytest.mark.numerics
def test_stop_and_resume_equals_uninterrupted(world):
    reference = run_init(config(world, "ref"))

    cfg = config(world, "resumed")
    with pytest.raises(Interrupted):
        run_init(cfg, should_stop=lambda step: step == 2)
    assert (partial_dir(cfg.out) / "state.pt").is_file() and not cfg.out.exists()
    done = run_init(cfg)

    assert not partial_dir(cfg.out).exists()
    assert weights(done).equal(weights(reference))
    assert len(log_lines(done)) == 6
    strip = [line.split('"seconds"')[0] for line in log_lines(done)]
    assert strip == [line.split('"seconds"')[0] for line in log_lines(reference)]


@pytest.mark.numerics
def test_crash_loses_at_most_save_every_steps_and_still_matches(world):
    reference = run_init(config(world, "ref"))
    cfg = config(world, "crashed", save_every=2)

    def crash(step):
        if step == 5:
            raise RuntimeError("killed")
        return False

    with pytest.raises(RuntimeError, match="killed"):
        run_init(cfg, should_stop=crash)
    done = run_init(cfg)  # resumes from the state of step 4
    assert weights(done).equal(weights(reference))


def test_resume_refuses_other_settings(world):
    cfg = config(world, "x")
    with pytest.raises(Interrupted):
        run_init(cfg, should_stop=lambda step: step == 1)
    other = replace(cfg, grounding=replace(cfg.grounding, lr=5e-3))
    with pytest.raises(InputError, match="lr"):
        run_init(other)
