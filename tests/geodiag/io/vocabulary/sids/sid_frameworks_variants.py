"""Other ways the frameworks write the same SIDs and codebooks as :mod:`sid_frameworks`
(read in their code; nothing copied): RQ-VAE-Recommender's ``PyTorchModelHubMixin``
safetensors, GRID's float32 code tensor, semantic-ids-llm's torch.compile'd
``best_model.pth``, TorchEasyRec's SID tables, and a vocabulary holding only the codes the
items use."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from geodiag_fixtures import DIM, base_rows, tokenizer_json
from sid_frameworks import (
    BASE,
    CODE_DIM,
    N_ITEMS,
    N_LEVELS,
    SPELL,
    K,
    _rqvae_state,
    code_books,
    sid_codes,
    sid_rows,
)

from geodiag.io.formats.safetensors import save_file


def write_rqvae_recommender_hub(folder: Path) -> Path:
    """RQ-VAE-Recommender's ``RqVae`` is a ``PyTorchModelHubMixin``: ``save_pretrained`` /
    ``push_to_hub`` write ``config.json`` and ``model.safetensors``
    (``safetensors.torch.save_model`` of the whole module: encoder, decoder and
    ``layers.{i}.embedding.weight``)."""
    import torch
    from safetensors.torch import save_model

    folder.mkdir(parents=True, exist_ok=True)
    state, _ = _rqvae_state("layers.", code_books())
    model = torch.nn.Module()
    for name, value in state.items():  # a module holding exactly that state
        *path, last = name.split(".")
        holder = model
        for part in path:
            if not hasattr(holder, part):
                holder.add_module(part, torch.nn.Module())
            holder = getattr(holder, part)
        holder.register_parameter(last, torch.nn.Parameter(value.clone()))
    save_model(model, str(folder / "model.safetensors"))
    config = {"input_dim": 12, "embed_dim": CODE_DIM, "codebook_size": K, "n_layers": N_LEVELS}
    (folder / "config.json").write_text(json.dumps(config))
    return folder / "model.safetensors"


def write_model_used_codes(folder: Path, spelling: str = "letter") -> Path:
    """A checkpoint whose tokenizer holds only the codes :func:`sid_codes` uses (as every
    framework adds them: LC-Rec's, GenRec's ``new_tokens.json``), structured rows."""
    folder.mkdir(parents=True, exist_ok=True)
    base = base_rows()
    codes = sid_codes()
    keep = [(i, c) for i in range(N_LEVELS) for c in range(K) if (codes[:, i] == c).any()]
    rows = sid_rows("structured")[[i * K + c for i, c in keep]]
    emb = np.concatenate([base, rows]).astype(np.float32)
    save_file({"model.embed_tokens.weight": emb}, folder / "model.safetensors")
    config = {"model_type": "llama", "hidden_size": DIM, "vocab_size": len(emb)}
    (folder / "config.json").write_text(json.dumps(config))
    names = [SPELL[spelling](i, c) for i, c in keep]
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer_json(BASE, names)))
    return folder


def write_grid_float(folder: Path) -> Path:
    """GRID's default writer without its post-processing: ``merge_list_of_keyed_tensors_
    to_single_tensor`` fills ``torch.zeros((items, levels))`` (float32) row by row."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    codes = sid_codes()
    out = torch.zeros((N_ITEMS, N_LEVELS))
    for i, row in enumerate(codes.tolist()):
        out[i] = torch.tensor(row)
    torch.save(out.cpu(), folder / "merged_predictions_tensor.pt")
    return folder / "merged_predictions_tensor.pt"


def write_semantic_ids_llm_best(folder: Path) -> Path:
    """semantic-ids-llm's ``best_model.pth`` (``save_checkpoint``): the model trained under
    ``torch.compile``, so ``model_state_dict`` keys start ``_orig_mod.``; the optimizer's
    and scheduler's states, ``val_loss`` and ``config.__dict__`` (paths within)."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    model = torch.nn.Module()
    model.vq_layers = torch.nn.ModuleList()
    for book in code_books():
        layer = torch.nn.Module()
        layer.embedding = torch.nn.Embedding(*book.shape)
        layer.embedding.weight.data = torch.from_numpy(book.copy())
        model.vq_layers.append(layer)
    model.encoder = torch.nn.Linear(12, CODE_DIM)
    compiled = torch.compile(model)  # lazy: nothing compiles until a forward
    opt = torch.optim.AdamW(compiled.parameters(), lr=3e-4)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
    config = {"category": "Video_Games", "checkpoint_dir": Path("checkpoints/rqvae")}
    torch.save(
        {
            "epoch": 3,
            "step": 120,
            "model_state_dict": compiled.state_dict(),
            "optimizer_state_dict": opt.state_dict(),
            "scheduler_state_dict": scheduler.state_dict(),
            "val_loss": 0.0123,
            "config": config,
        },
        folder / "best_model.pth",
    )
    return folder / "best_model.pth"


def write_torcheasyrec(folder: Path) -> dict[str, Path]:
    """TorchEasyRec's ``tzrec.predict`` output: ``part-0.parquet`` (``codes`` list<int64>,
    then the reserved ``item_id``) as its ParquetWriter writes it, and the CSV table with
    ``codes`` comma-delimited (pyarrow's CSV writer takes no list column)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    codes = sid_codes()
    item_ids = pa.array(np.arange(N_ITEMS, dtype=np.int64) + 5000)
    batch = pa.RecordBatch.from_arrays([pa.array(codes.tolist()), item_ids], ["codes", "item_id"])
    writer = pq.ParquetWriter(folder / "part-0.parquet", batch.schema)
    writer.write_batch(batch)
    writer.close()
    text = pa.array([",".join(map(str, r)) for r in codes.tolist()])
    rows = pa.RecordBatch.from_arrays([text, item_ids], ["codes", "item_id"])
    with pacsv.CSVWriter(folder / "part-0.csv", rows.schema) as w:
        w.write(rows)
    return {"parquet": folder / "part-0.parquet", "csv": folder / "part-0.csv"}
