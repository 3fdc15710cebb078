"""One rank of a real ``transformers.Trainer`` run asked for FSDP with a sharded state dict
(gloo, CPU), for tests/geodiag/io/formats/test_dcp_trainer.py.

The Trainer gets ``fsdp=True`` and ``fsdp_config`` ``{"fsdp_version": 2,
"state_dict_type": "SHARDED_STATE_DICT"}`` and saves ``checkpoint-2/`` after 2 steps.
The rank writes what the run was (whether the Trainer enabled FSDP, accelerate's
distributed type, the wrapper of the model) beside the output folder: on CPU accelerate
drops the FSDP plugin, and the test pins that. A module of its own so that the spawned
processes can import the worker by name.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

STEPS = 2


def worker(rank: int, world: int, root: str, port: int, sids: list[str]) -> None:
    import torch
    import torch.distributed as dist
    import transformers

    # The variables torchrun sets: accelerate reads them to join the gloo group itself.
    from dcp_fsdp2_run import N_WORDS, model, torchrun_env
    from tiny_models import word_tokenizer

    os.environ.update(torchrun_env(rank, world, port))
    torch.set_num_threads(1)
    tok = word_tokenizer(N_WORDS)
    tok.add_tokens(sids)
    n_rows = len(tok)
    x = torch.arange(8) % n_rows
    data = [{"input_ids": x, "labels": x} for _ in range(2 * world * STEPS)]
    args = transformers.TrainingArguments(
        output_dir=str(Path(root) / "out"),
        max_steps=STEPS,
        save_steps=STEPS,
        per_device_train_batch_size=2,
        report_to=[],
        use_cpu=True,
        fsdp=True,
        fsdp_config={
            "fsdp_version": 2,
            "state_dict_type": "SHARDED_STATE_DICT",
            "transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"],
        },
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(
        model=model(n_rows),
        args=args,
        train_dataset=data,
        data_collator=transformers.default_data_collator,
        processing_class=tok,
    )
    trainer.train()
    if rank == 0:
        run = {
            "is_fsdp_enabled": trainer.is_fsdp_enabled,
            "distributed_type": str(trainer.accelerator.state.distributed_type),
            "wrapper": type(trainer.model_wrapped).__name__,
            "state_dict_type": trainer.args.fsdp_plugin_args["state_dict_type"],
        }
        (Path(root) / "run.json").write_text(json.dumps(run))
    dist.barrier()  # leave together (see callback/trainer_distributed_run.py)
    dist.destroy_process_group()
