"""Write one DeepSpeed release's ZeRO-2 and ZeRO-3 checkpoints for test_releases.py.

Run by ``make_fixtures.sh`` in a venv holding that release (and torch, safetensors):

    DS_ACCELERATOR=cpu python write_deepspeed.py OUT

A 2-rank gloo run on CPU, as tests/geodiag/io/formats/zero_deepspeed_run.py, of a model small
enough to commit: ``model.embed_tokens`` (VOCAB x DIM, the last N_NEW rows new),
``model.layers.0.mlp.proj`` (DIM x DIM) and an untied ``lm_head`` kept frozen (so
``frozen_param_fragments`` hold it). bf16 with fp32 master weights, torch's Adam as the
client optimizer (nothing compiled), one step, ``engine.save_checkpoint`` into
``OUT/zero2`` and ``OUT/zero3``, with ``config.json``. Beside each, ``<folder>_consolidated.safetensors``: what
that release's own ``get_fp32_state_dict_from_zero_checkpoint`` (``zero_to_fp32.py``) makes of
it, the test's independent reference; ``OUT/written_by.json`` names the releases. The
files are as the release wrote them (only ``zero_to_fp32.py`` left out: 25 kB, the release's).
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

VOCAB, N_NEW, DIM = 40, 8, 8
STAGES = {"zero2": 2, "zero3": 3}


def _model():
    import torch

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = torch.nn.Module()
            self.model.embed_tokens = torch.nn.Embedding(VOCAB, DIM)
            self.model.layers = torch.nn.ModuleList([torch.nn.Module()])
            self.model.layers[0].mlp = torch.nn.Module()
            self.model.layers[0].mlp.proj = torch.nn.Linear(DIM, DIM, bias=False)
            self.lm_head = torch.nn.Linear(DIM, VOCAB, bias=False)

        def forward(self, input_ids):
            h = self.model.embed_tokens(input_ids)
            h = h + torch.tanh(self.model.layers[0].mlp.proj(h))
            logits = self.lm_head(h).float()
            return torch.nn.functional.cross_entropy(
                logits[:, :-1].reshape(-1, VOCAB), input_ids[:, 1:].reshape(-1)
            )

    torch.manual_seed(0)
    return Tiny()


def _config(stage: int) -> dict:
    return {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": stage},
        "zero_allow_untested_optimizer": True,
        "bf16": {"enabled": True},
    }


def worker(rank: int, world: int, root: str, port: int) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world),
        LOCAL_SIZE=str(world),  # the launcher's: else the CPU accelerator runs numactl
        DS_ACCELERATOR="cpu",
    )
    import importlib

    import deepspeed
    import torch
    import torch.distributed as dist

    # Its shared-memory allreduce op is compiled with the C++ compiler when the group starts
    # (6 min on 2 loaded cores): gloo does the same reductions, and the files are the same.
    # (By module: the attribute deepspeed.comm.torch is the torch package.)
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None

    torch.set_num_threads(1)
    for folder, stage in STAGES.items():
        m = _model()
        m.lm_head.weight.requires_grad_(False)
        opt = torch.optim.Adam([p for p in m.parameters() if p.requires_grad], lr=1e-2)
        engine, *_ = deepspeed.initialize(model=m, optimizer=opt, config=_config(stage))
        x = (torch.arange(16).reshape(2, 8) * 5 + rank) % VOCAB
        engine.backward(engine(x))
        with torch.no_grad():  # 0.17/0.18's ZeRO-2 all-gathers into split views in place,
            engine.step()  # which torch 2.13's autograd refuses in grad mode
        engine.save_checkpoint(str(Path(root) / folder))
        dist.barrier()


def main(out: Path) -> None:
    import deepspeed
    import torch
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    if not all((out / folder / "latest").is_file() for folder in STAGES):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        torch.multiprocessing.spawn(worker, args=(2, str(out), port), nprocs=2, join=True)
    # Releases before 0.16 call torch.load with its default, weights_only since torch 2.6,
    # which refuses their own classes: these are our own files, just written.
    os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": VOCAB,
        "hidden_size": DIM,
        "tie_word_embeddings": False,
    }
    for folder in STAGES:
        state = get_fp32_state_dict_from_zero_checkpoint(str(out / folder))
        tensors = {k: v.detach().float().contiguous() for k, v in state.items()}
        save_file(tensors, out / f"{folder}_consolidated.safetensors")  # not in the folder
        (out / folder / "config.json").write_text(json.dumps(config, indent=1) + "\n")
        (out / folder / "zero_to_fp32.py").unlink(missing_ok=True)  # the release's script
    written = {"deepspeed": deepspeed.__version__, "torch": torch.__version__}
    (out / "written_by.json").write_text(json.dumps(written, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
