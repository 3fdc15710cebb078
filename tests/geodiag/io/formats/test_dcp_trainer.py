"""A real ``transformers.Trainer`` run asked for FSDP with a sharded state dict
(trainer_fsdp_run.py: 2 spawned gloo ranks on CPU, 2 steps, ``checkpoint-2/``).

On CPU the Trainer cannot write a sharded FSDP checkpoint: accelerate (1.15) turns the
FSDP plugin on only for accelerator types (MULTI_GPU, NPU, XPU, ...), and on MULTI_CPU
drops it without an error, so the Trainer trains under DistributedDataParallel and
saves a whole ``model.safetensors``, no ``pytorch_model_fsdp_0/``. The first test pins
that, so that the day it shards on CPU the suite says so and the comparison with the
consolidated copy (test_dcp_accelerate.py, on the folders accelerate's own
``save_fsdp_model``/``save_fsdp_optimizer`` write, called as the Trainer calls them) can
run on the Trainer's own folder. The second: geodiag reads the ``checkpoint-N/`` the Trainer does write
(optimizer, scheduler, RNG states and ``training_args.bin`` beside the weights) as the
weights, config and tokenizer alone.
"""

from __future__ import annotations

import json
import shutil
import socket

import pytest
import trainer_fsdp_run as fixture
from test_dcp import SIDS, _metrics, run

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
import torch.distributed as dist  # noqa: E402

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch built without distributed")

WEIGHTS_CONFIG_TOKENIZER = [
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The run's root: out/checkpoint-2/ and run.json (what rank 0's Trainer was)."""
    root = tmp_path_factory.mktemp("trainer_fsdp")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.multiprocessing.spawn(
        fixture.worker, args=(2, str(root), port, SIDS), nprocs=2, join=True
    )
    return root


def test_on_cpu_the_trainer_drops_fsdp_and_saves_whole_weights(trained):
    run_info = json.loads((trained / "run.json").read_text())
    assert run_info == {
        "is_fsdp_enabled": False,
        "distributed_type": "DistributedType.MULTI_CPU",
        "wrapper": "DistributedDataParallel",
        "state_dict_type": "SHARDED_STATE_DICT",
    }, "the Trainer now shards on CPU: compare its pytorch_model_fsdp_0/ (issue 32)"
    ckpt = trained / "out" / f"checkpoint-{fixture.STEPS}"
    assert sorted(p.name for p in ckpt.iterdir()) == sorted(
        WEIGHTS_CONFIG_TOKENIZER
        + [
            "optimizer.pt",
            "rng_state_0.pth",
            "rng_state_1.pth",
            "scheduler.pt",
            "trainer_state.json",
            "training_args.bin",
        ]
    )


def test_the_trainers_checkpoint_reads_as_its_weights_alone(trained, tmp_path):
    ckpt = trained / "out" / f"checkpoint-{fixture.STEPS}"
    alone = tmp_path / "alone"
    alone.mkdir()
    for name in WEIGHTS_CONFIG_TOKENIZER:
        shutil.copy(ckpt / name, alone / name)
    got, want = _metrics(ckpt), _metrics(alone)
    # The stack is the one difference, and it is right: trainer_state.json says Trainer.
    assert got.pop("stack") == {"name": "transformers", "evidence": "trainer_state.json"}
    want.pop("stack")
    assert got == want
    assert run("check", ckpt).exit_code == run("check", alone).exit_code != 2
