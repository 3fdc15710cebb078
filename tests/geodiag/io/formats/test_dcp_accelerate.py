"""A Trainer-shaped sharded FSDP checkpoint whose model and optimizer folders accelerate
writes itself (accelerate_fsdp_run.py: ``save_fsdp_model`` and ``save_fsdp_optimizer``,
the Trainer's two calls, on a real 2-rank FSDP2 model with a real
``FullyShardedDataParallelPlugin``), against the consolidated copy torch's
``dcp_to_torch_save`` makes of ``pytorch_model_fsdp_0/``, saved as safetensors: the
verdict, the exit code and the figures must be the same.

Two layouts: ``checkpoint-2/`` as the Trainer's sharded path leaves it (no config.json,
no tokenizer: ``save_model`` writes neither with a sharded state dict, so the new rows
come from ``--base-vocab-size``), and the same folder with the model's config and
tokenizer saved beside (``save_pretrained``), read as the tokenizer says.
"""

from __future__ import annotations

import json
import shutil
import socket

import accelerate_fsdp_run as fixture
import dcp_fsdp2_run
import pytest
from geodiag_fixtures import one_line_exit_2
from test_dcp import SIDS, _metrics, run

from geodiag.io.formats.dcp import DCPStore
from geodiag.io.formats.registry import open_store

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")
import torch.distributed as dist  # noqa: E402

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch built without distributed")

BASE_VOCAB = dcp_fsdp2_run.N_WORDS + 1  # the words and <unk>; the SIDs follow
SHARDS = [".metadata", "__0_0.distcp", "__1_0.distcp"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """out/checkpoint-2/ (accelerate's folders, the Trainer's files beside) and run.json;
    with_config/ (the same, config and tokenizer added); consolidated/ (model.safetensors
    alone) and consolidated_config/ (config and tokenizer beside)."""
    from safetensors.torch import save_file
    from tiny_models import word_tokenizer
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    root = tmp_path_factory.mktemp("dcp_accelerate")
    tok = word_tokenizer(dcp_fsdp2_run.N_WORDS)
    tok.add_tokens(SIDS)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.multiprocessing.spawn(
        fixture.worker, args=(2, str(root), port, len(tok)), nprocs=2, join=True
    )
    ckpt = root / "out" / f"checkpoint-{fixture.STEPS}"
    dcp_to_torch_save(ckpt / "pytorch_model_fsdp_0", root / "full.pt")
    state = torch.load(root / "full.pt", weights_only=True)
    assert list(state) == ["model"]  # accelerate nests the model's state dict
    for name in ("consolidated", "consolidated_config"):
        (root / name).mkdir()
        weights = {k: v.contiguous() for k, v in state["model"].items()}
        save_file(weights, root / name / "model.safetensors")
    shutil.copytree(ckpt, root / "with_config")
    config = dcp_fsdp2_run.model(len(tok)).config
    for folder in (root / "with_config", root / "consolidated_config"):
        config.save_pretrained(folder)
        tok.save_pretrained(folder)
    return root


def _checkpoint(saved):
    return saved / "out" / f"checkpoint-{fixture.STEPS}"


def test_accelerate_wrote_the_sharded_model_of_a_real_fsdp2_run(saved):
    """What is real (the plugin, the FSDP2 sharding, accelerate's writers) and what the
    Trainer's sharded path leaves: the two DCP folders and its state files, no weights,
    config or tokenizer."""
    assert json.loads((saved / "run.json").read_text()) == {
        "distributed_type": "DistributedType.MULTI_CPU",
        "fsdp_plugin_kept": False,
        "sharded": True,
        "state_dict_type": "StateDictType.SHARDED_STATE_DICT",
        "fsdp_version": 2,
        "embedding_rows_on_rank_0": 61,
    }
    ckpt = _checkpoint(saved)
    assert sorted(p.name for p in ckpt.iterdir()) == [
        "optimizer_0",
        "pytorch_model_fsdp_0",
        "rng_state_0.pth",
        "rng_state_1.pth",
        "scheduler.pt",
        "trainer_state.json",
    ]
    for folder in ("optimizer_0", "pytorch_model_fsdp_0"):
        assert sorted(p.name for p in (ckpt / folder).iterdir()) == SHARDS


def _same_but_the_stack(got: dict, want: dict) -> None:
    """The stack is the one difference, and it is right: trainer_state.json says Trainer."""
    assert got.pop("stack") == {"name": "transformers", "evidence": "trainer_state.json"}
    want.pop("stack")
    assert got == want


def test_the_trainers_layout_gives_the_consolidated_verdict_and_figures(saved):
    ckpt, full = _checkpoint(saved), saved / "consolidated"
    new_rows = ("--base-vocab-size", BASE_VOCAB)
    _same_but_the_stack(_metrics(ckpt, *new_rows), _metrics(full, *new_rows))
    # The subfolder alone: its checkpoint folder's trainer_state.json still names the stack.
    _same_but_the_stack(
        _metrics(ckpt / "pytorch_model_fsdp_0", *new_rows), _metrics(full, *new_rows)
    )
    codes = [run("check", p, *new_rows).exit_code for p in (ckpt, full)]
    assert codes[0] == codes[1] != 2
    # Without a tokenizer neither says which rows are new, and both say so the same way.
    problems = [one_line_exit_2(run("check", p)).split(": ", 2)[2] for p in (ckpt, full)]
    assert problems[0] == problems[1]


def test_with_config_and_tokenizer_beside_the_verdict_and_figures_are_the_same(saved):
    ckpt, full = saved / "with_config", saved / "consolidated_config"
    _same_but_the_stack(_metrics(ckpt), _metrics(full))
    assert run("check", ckpt).exit_code == run("check", full).exit_code != 2


def test_the_optimizers_sharded_state_is_never_the_weights(saved):
    """optimizer_0/ is a DCP folder too, with a moment beside every weight of the same
    shape (``exp_avg`` of the embedding is [122, 16]): never read as the model, and passed
    by itself it is named for what it is, with the folder to pass instead."""
    ckpt = _checkpoint(saved)
    store = open_store(ckpt)
    assert isinstance(store, DCPStore)
    assert store.folder == ckpt / "pytorch_model_fsdp_0"
    assert sorted(store.names()) == sorted(open_store(saved / "consolidated").names())
    line = one_line_exit_2(run("check", ckpt / "optimizer_0", "--base-vocab-size", BASE_VOCAB))
    assert "optimizer_0" in line and "only optimizer state" in line
    assert "'optimizer'" in line and "pytorch_model_fsdp_0/" in line
