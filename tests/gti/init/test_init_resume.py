"""A grounding run stopped (cleanly or by a crash) and resumed ends with the same rows
as an uninterrupted one."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import pytest
from safetensors.torch import load_file

from geodiag.errors import InputError
from gti.checkpoint_files import partial_dir
from gti.errors import Interrupted
from gti.init.config import GroundingConfig, InitConfig
from gti.init.run import grounding_fingerprint, run_init


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


def timeless(ckpt):
    """train_log.jsonl without its clock readings (they differ between runs)."""
    out = []
    for line in log_lines(ckpt):
        entry = json.loads(line)
        for key in ("seconds", "elapsed_s", "measure_s"):
            entry.pop(key, None)
        out.append(entry)
    return out


# The grounding options that carry state across steps: LazyAdam's per-row moments and
# step counts, the schedule's position, the epoch layout, and the structure curve.
OPTIONS = {
    "paper": {},
    "chosen": {
        "optimizer": "lazy-adam",
        "warmup_steps": 2,
        "decay": "cosine",
        "text_to_sid_repeats": 2,
        "structure_every": 2,
    },
    # distillation's targets come from the step's batch: nothing of them carried over
    "distill": {
        "objective": "ce+distill",
        "distill_target": "logits",
        "optimizer": "lazy-adam",
        "structure_every": 2,
    },
}


# Exact equality, not a tolerance: the resumed run performs the very same float32
# operations in the same order as the uninterrupted one (rows, optimizer state and RNG
# are restored bit for bit; batch k is a pure function of seed and k; the learning rate
# of step k a pure function of k), in one process with the same kernels and thread
# count, so there is no rounding difference to tolerate.
@pytest.mark.numerics
@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_stop_and_resume_equals_uninterrupted(world, options):
    reference = run_init(config(world, "ref", **options))

    cfg = config(world, "resumed", **options)
    with pytest.raises(Interrupted):
        run_init(cfg, should_stop=lambda step: step == 3)
    assert (partial_dir(cfg.out) / "state.pt").is_file() and not cfg.out.exists()
    done = run_init(cfg)

    assert not partial_dir(cfg.out).exists()
    assert weights(done).equal(weights(reference))
    n_structure = 4 if options else 0  # steps 0, 2, 4, 6
    assert len(log_lines(done)) == 6 + n_structure
    assert timeless(done) == timeless(reference)


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


@pytest.mark.parametrize(("field", "value"), [("lr", 5e-3), ("objective", "ce+distill")])
def test_resume_refuses_other_settings(world, field, value):
    cfg = config(world, "x")
    with pytest.raises(Interrupted):
        run_init(cfg, should_stop=lambda step: step == 1)
    other = replace(cfg, grounding=replace(cfg.grounding, **{field: value}))
    with pytest.raises(InputError, match=field):
        run_init(other)


def test_grounding_fingerprint_is_the_run_the_sids_content_and_the_fingerprinted_fields(tmp_path):
    (tmp_path / "semantic_ids.json").write_text('{"levels": []}')
    run_config = {
        "strategy": "gti",
        "model": "tiny",
        "sids": "/somewhere",
        "grounding": {"lr": 1.0},
    }
    g = GroundingConfig(lr=2e-3, save_every=7)
    got = grounding_fingerprint(run_config, tmp_path, g)
    assert got["strategy"] == "gti" and got["model"] == "tiny"
    assert "sids" not in got and "grounding" not in got  # the path may move; g says the rest
    assert got["sids_sha256"] == hashlib.sha256(b'{"levels": []}').hexdigest()
    assert got["lr"] == 2e-3
    assert "save_every" not in got  # resumable: a resumed run may save more often
