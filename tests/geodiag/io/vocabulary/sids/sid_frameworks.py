"""Fixtures written the way each generative-recommendation framework writes its SID map and
codebooks (read in their code; nothing copied), all holding the same SIDs and codebooks,
plus our own sidecar route and tiny checkpoints whose tokenizer spells the SID tokens as
each framework does. Run as a script to write them into a folder:

    .venv/bin/python tests/geodiag/io/vocabulary/sids/sid_frameworks.py OUT

The same SIDs everywhere (:func:`sid_codes`): ``N_ITEMS`` items over 3 levels of ``K``
codes; level c never uses its last ``DEAD_C`` codes (dead codes), and ``N_PAIRS`` pairs
of items share a tuple (collisions, which the de-duplicating formats tell apart).
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # geodiag_fixtures, as a script

from geodiag_fixtures import DIM, base_rows, tokenizer_json  # noqa: E402

from geodiag.io.formats.safetensors import save_file  # noqa: E402
from geodiag.io.vocabulary import sidecar  # noqa: E402

N_ITEMS = 240
N_LEVELS = 3
K = 16
CODE_DIM = 8
DEAD_C = 3
N_PAIRS = 6
BASE = len(base_rows())


def sid_codes(seed: int = 7) -> np.ndarray:
    """(N_ITEMS, 3) 0-based codes with planted dead codes and collisions."""
    rng = np.random.default_rng(seed)
    codes = np.column_stack(
        [
            rng.integers(K, size=N_ITEMS),
            rng.integers(K, size=N_ITEMS),
            rng.integers(K - DEAD_C, size=N_ITEMS),
        ]
    )
    codes[:K, 0] = np.arange(K)  # every code of a and b used at least once
    codes[:K, 1] = np.arange(K)[::-1]
    for p in range(N_PAIRS):  # item 200 + p shares item 100 + p's tuple
        codes[200 + p] = codes[100 + p]
    return codes.astype(np.int64)


def dedup_digit(codes: np.ndarray, start: int) -> np.ndarray:
    """A counter within each group of items sharing a tuple: ``start`` for an item alone
    and for the first of a group (GRID: alone 0, a group 1..N; pass start=None for that)."""
    out = np.zeros(len(codes), np.int64)
    seen: dict[tuple, int] = {}
    for i, row in enumerate(map(tuple, codes)):
        seen[row] = seen.get(row, 0) + 1
        out[i] = seen[row] - 1 + start
    return out


def grid_dedup(codes: np.ndarray) -> np.ndarray:
    """GRID's column: 0 for an item alone, 1..N within a group of N sharing a tuple."""
    _, inverse, counts = np.unique(codes, axis=0, return_inverse=True, return_counts=True)
    out = np.zeros(len(codes), np.int64)
    for g in np.flatnonzero(counts > 1):
        out[np.flatnonzero(inverse.reshape(-1) == g)] = np.arange(1, counts[g] + 1)
    return out


def code_books(seed: int = 11) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(K, CODE_DIM)).astype(np.float32) for _ in range(N_LEVELS)]


def sid_rows(kind: str, seed: int = 5) -> np.ndarray:
    """(3 K, DIM) rows of the SID tokens in (level, code) order: ``structured`` (each
    level's codebook through a random linear map, GTI-like) or ``mean`` (every row the
    vocabulary mean, as a mean-resizing extension leaves them)."""
    base = base_rows()
    if kind == "mean":
        return np.tile(base.mean(axis=0), (N_LEVELS * K, 1))
    rng = np.random.default_rng(seed)
    rows = np.concatenate([b @ (rng.normal(size=(CODE_DIM, DIM)) * 0.1) for b in code_books()])
    return rows + rng.normal(size=rows.shape) * 0.002


# The spelling of code c at level i in each framework's vocabulary.
SPELL = {
    "letter": lambda i, c: f"<{'abc'[i]}_{c}>",
    "letter1": lambda i, c: f"<{'abc'[i]}_{c + 1}>",  # MiniOneRec's 1-based
    "s_letter": lambda i, c: f"<s_{'abc'[i]}_{c}>",
    "flat": lambda i, c: f"<|sid_{i * K + c}|>",
}


def write_model(
    folder: Path, spelling: str, kind: str = "structured", extra: tuple[str, ...] = ()
) -> Path:
    """A tiny checkpoint: base rows, then the 3 K SID tokens (spelled ``spelling``) in
    (level, code) order, then ``extra`` new tokens (markers, de-duplication tokens)."""
    folder.mkdir(parents=True, exist_ok=True)
    base = base_rows()
    names = [SPELL[spelling](i, c) for i in range(N_LEVELS) for c in range(K)] + list(extra)
    rng = np.random.default_rng(9)
    extra_rows = rng.normal(size=(len(extra), DIM)) * base.std()
    emb = np.concatenate([base, sid_rows(kind), extra_rows]).astype(np.float32)
    save_file({"model.embed_tokens.weight": emb}, folder / "model.safetensors")
    config = {"model_type": "llama", "hidden_size": DIM, "vocab_size": len(emb)}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer_json(BASE, names)))
    return folder


def write_sidecar(folder: Path, kind: str = "structured") -> Path:
    """Our own route: the model, ``semantic_ids.json`` and ``codebooks.safetensors``."""
    write_model(folder, "letter", kind)
    codes = sid_codes()
    levels = [
        sidecar.Level(sidecar.level_name(i), K, list(range(BASE + i * K, BASE + (i + 1) * K)))
        for i in range(N_LEVELS)
    ]
    items = {str(i): [int(c) for c in row] for i, row in enumerate(codes)}
    sidecar.save(sidecar.SemanticIds(BASE, levels, items, {"stage": "test"}), folder)
    books = {sidecar.level_name(i): b for i, b in enumerate(code_books())}
    save_file(books, folder / sidecar.CODEBOOKS_FILENAME)
    return folder


# --- torch-side writers (torch is imported only here: the tests' venv has it) ----------


def _rqvae_state(prefix: str, books: list[np.ndarray], attr: str = "embedding.weight"):
    """A small RQ-VAE-like module's state dict and optimizer state after one AdamW step:
    an MLP encoder and decoder, and ``{prefix}{i}.{attr}`` the codebooks."""
    import torch

    class Quantizer(torch.nn.Module):
        def __init__(self, book: np.ndarray) -> None:
            super().__init__()
            if attr == "embedding.weight":
                self.embedding = torch.nn.Embedding(*book.shape)
                self.embedding.weight.data = torch.from_numpy(book.copy())
            else:
                self.centroids = torch.nn.Parameter(torch.from_numpy(book.copy()))

    layers = torch.nn.ModuleList([Quantizer(b) for b in books])
    model = torch.nn.Module()
    model.encoder = torch.nn.Sequential(
        torch.nn.Linear(12, 10), torch.nn.ReLU(), torch.nn.Linear(10, CODE_DIM)
    )
    model.decoder = torch.nn.Sequential(torch.nn.Linear(CODE_DIM, 12))
    holder = model
    *path, last = prefix.rstrip(".").split(".")
    for name in path:
        child = torch.nn.Module()
        setattr(holder, name, child)
        holder = child
    setattr(holder, last, layers)
    opt = torch.optim.AdamW(model.encoder.parameters(), lr=1e-3)
    model.encoder(torch.ones(2, 12)).sum().backward()
    opt.step()
    return model.state_dict(), opt.state_dict()


def write_lcrec(folder: Path) -> dict[str, Path]:
    """LC-Rec: ``Games.index.json`` (json.dump of {int: ["<a_12>", ...]}, 0-based, collisions
    left) and the RQ-VAE checkpoint ``best_collision_model.pth`` as its trainer saves it."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    codes = sid_codes()
    index = {
        i: [SPELL["letter"](lv, int(c)) for lv, c in enumerate(row)] for i, row in enumerate(codes)
    }
    (folder / "Games.index.json").write_text(json.dumps(index))
    state, optimizer = _rqvae_state("rq.vq_layers.", code_books())
    args = argparse.Namespace(
        lr=1e-3,
        epochs=3000,
        batch_size=1024,
        data_path="../data/Games/Games.emb-llama-td.npy",
        num_emb_list=[K] * N_LEVELS,
        e_dim=CODE_DIM,
        layers=[10],
        ckpt_dir="./ckpt/Games",
        sk_epsilons=[0.0, 0.0, 0.003],
        device="cuda:0",
    )
    ckpt = {
        "args": args,
        "epoch": 2999,
        "best_loss": 0.0123,
        "best_collision_rate": 0.025,
        "state_dict": state,
        "optimizer": optimizer,
    }
    torch.save(ckpt, folder / "best_collision_model.pth", pickle_protocol=4)
    return {"sids": folder / "Games.index.json", "codebooks": folder / "best_collision_model.pth"}


def write_letter_paths(folder: Path) -> Path:
    """An LC-Rec-family checkpoint whose args hold pathlib paths (LETTER-style forks)."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    state, optimizer = _rqvae_state("rq.vq_layers.", code_books())
    args = argparse.Namespace(data_path=Path("data/Games.npy"), ckpt_dir=Path("/ckpt/letter"))
    ckpt = {
        "args": args,
        "epoch": 1,
        "best_loss": 0.1,
        "best_collision_rate": 0.1,
        "state_dict": state,
        "optimizer": optimizer,
    }
    torch.save(ckpt, folder / "letter.pth")
    return folder / "letter.pth"


def minionerec_index(codes: np.ndarray) -> dict[str, list[str]]:
    """MiniOneRec's constrained/plus index: every code + 1, and ``<d_k>`` (k = 1, 2, ...
    within the group) appended only to the items that share a tuple."""
    plus = codes + 1
    _, inverse, counts = np.unique(plus, axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    rank: dict[int, int] = {}
    out = {}
    for i, row in enumerate(plus):
        tokens = [SPELL["letter"](lv, int(c)) for lv, c in enumerate(row)]
        g = int(inverse[i])
        if counts[g] > 1:
            rank[g] = rank.get(g, 0) + 1
            tokens.append(f"<d_{rank[g]}>")
        out[str(i)] = tokens
    return out


def dedup_tokens() -> tuple[str, ...]:
    """The ``<d_k>`` tokens MiniOneRec's vocabulary gets from its index."""
    found = {t for v in minionerec_index(sid_codes()).values() for t in v[N_LEVELS:]}
    return tuple(sorted(found))


def write_minionerec(folder: Path) -> dict[str, Path]:
    """MiniOneRec: ``Games.index.json`` (1-based, ragged <d_k>, indent=2),
    ``Games.codebooks_constrained.npz`` and ``Games.codes_constrained.npy`` ((N, L) int32)."""
    folder.mkdir(parents=True, exist_ok=True)
    codes = sid_codes()
    (folder / "Games.index.json").write_text(json.dumps(minionerec_index(codes), indent=2))
    books = code_books()
    np.savez_compressed(
        folder / "Games.codebooks_constrained.npz",
        **{f"codebook_{i}": b for i, b in enumerate(books)},
    )
    np.save(folder / "Games.codes_constrained.npy", codes.astype(np.int32))
    return {
        "sids": folder / "Games.index.json",
        "codebooks": folder / "Games.codebooks_constrained.npz",
        "npy": folder / "Games.codes_constrained.npy",
    }


def _fake_module_class(module: str, name: str, base: type) -> type:
    """A class pickled as ``module.name`` (Lightning's, absent from the test venv)."""
    mod = sys.modules.get(module)
    if mod is None:
        parts = module.split(".")
        for i in range(1, len(parts) + 1):
            sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
        mod = sys.modules[module]
    cls = type(name, (base,), {"__module__": module})
    setattr(mod, name, cls)
    return cls


def write_grid(folder: Path) -> dict[str, Path]:
    """GRID: ``merged_predictions_tensor.pt`` (int64, (levels + 1, items), the last row its
    de-duplication column) and a Lightning ``.ckpt`` of the residual quantizer."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    codes = sid_codes()
    table = torch.from_numpy(np.column_stack([codes, grid_dedup(codes)])).long()
    torch.save(table.T.contiguous(), folder / "merged_predictions_tensor.pt")
    state, optimizer = _rqvae_state("quantization_layer_list.", code_books(), attr="centroids")
    attribute_dict = _fake_module_class("lightning.fabric.utilities.data", "AttributeDict", dict)
    ckpt = {
        "epoch": 9,
        "global_step": 1200,
        "pytorch-lightning_version": "2.5.0",
        "state_dict": state,
        "loops": {"fit_loop": {"state_dict": {}, "epoch_progress": {"total": {"ready": 10}}}},
        "callbacks": {
            "ModelCheckpoint{'monitor': 'val/loss', 'mode': 'min'}": {"best_model_score": None}
        },
        "optimizer_states": [optimizer],
        "lr_schedulers": [],
        "hparams_name": "kwargs",
        "hyper_parameters": attribute_dict(
            n_layers=N_LEVELS, n_clusters=K, normalize_residuals=True
        ),
    }
    torch.save(ckpt, folder / "rkmeans-epoch=9.ckpt")
    return {
        "sids": folder / "merged_predictions_tensor.pt",
        "codebooks": folder / "rkmeans-epoch=9.ckpt",
    }


def write_etegrec(folder: Path) -> dict[str, Path]:
    """ETEGRec: ``{epoch}.code.json`` (row 0 the padding [-1]*4, row i item i's
    [c0, c1, c2, dedup]) and ``{epoch}.pt.rqvae`` (the RQ-VAE's plain state dict)."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    codes = sid_codes()
    rows = np.column_stack([codes, dedup_digit(codes, 0)])
    table = [[-1] * (N_LEVELS + 1), *rows.tolist()]
    (folder / "12.code.json").write_text(json.dumps(table))
    state, _ = _rqvae_state("rq.vq_layers.", code_books())
    torch.save(state, folder / "12.pt.rqvae")
    return {"sids": folder / "12.code.json", "codebooks": folder / "12.pt.rqvae"}


def write_openonerec(folder: Path) -> dict[str, Path]:
    """OpenOneRec: ``items_codes.parquet`` (pid, codes: list<int64>) and ``model.pt`` (a
    plain state dict ``centroids.{i}``)."""
    import pandas as pd
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    codes = sid_codes()
    pids = [f"p{1000 + i}" for i in range(N_ITEMS)]
    pd.DataFrame({"pid": pids, "codes": codes.tolist()}).to_parquet(
        folder / "items_codes.parquet", index=False
    )
    params = torch.nn.ParameterList(
        [torch.nn.Parameter(torch.from_numpy(b.copy()), requires_grad=False) for b in code_books()]
    )
    holder = torch.nn.Module()
    holder.centroids = params
    torch.save(holder.state_dict(), folder / "model.pt")
    return {"sids": folder / "items_codes.parquet", "codebooks": folder / "model.pt"}


def write_semantic_ids_llm(folder: Path) -> dict[str, Path]:
    """semantic-ids-llm: the item table (parent_asin, semantic_id_0..3, semantic_id) and the
    RQ-VAE's final save ``{"model_state_dict", "config": config.__dict__}`` (paths within)."""
    import pandas as pd
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    codes = sid_codes()
    full = np.column_stack([codes, dedup_digit(codes, 0)])
    frame = {"parent_asin": [f"B{i:09d}" for i in range(N_ITEMS)]}
    frame |= {f"semantic_id_{k}": full[:, k] for k in range(full.shape[1])}
    frame["semantic_id"] = ["-".join(map(str, r)) for r in full.tolist()]
    pd.DataFrame(frame).to_parquet(
        folder / "Video_Games_items_with_semantic_ids.parquet", index=False
    )
    state, _ = _rqvae_state("vq_layers.", code_books())
    config = {
        "category": "Video_Games",
        "data_dir": Path("data"),
        "embeddings_path": Path("data/output/x.parquet"),
        "codebook_size": K,
        "codebook_quantization_levels": N_LEVELS,
    }
    torch.save({"model_state_dict": state, "config": config}, folder / "final_rqvae_model.pth")
    return {
        "sids": folder / "Video_Games_items_with_semantic_ids.parquet",
        "codebooks": folder / "final_rqvae_model.pth",
    }


def write_rqvae_recommender(folder: Path) -> Path:
    """RQ-VAE-Recommender: ``checkpoint_{iter}.pt`` with ``model`` its state dict
    (``layers.{i}.embedding.weight``); ``model_config`` a plain dict here."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    state, optimizer = _rqvae_state("layers.", code_books())
    cfg = {"input_dim": 12, "embed_dim": CODE_DIM, "codebook_size": K, "n_layers": N_LEVELS}
    torch.save(
        {"iter": 49999, "model": state, "model_config": cfg, "optimizer": optimizer},
        folder / "checkpoint_49999.pt",
    )
    return folder / "checkpoint_49999.pt"


class Payload:
    """A planted pickle: unpickling it would run ``touch MARKER``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204
        import os

        return (os.system, (f"touch {self.marker}",))


def write_planted(folder: Path, marker: Path) -> Path:
    """An LC-Rec-shaped ``.pth`` whose args run a command when unpickled with torch.load."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    state, _ = _rqvae_state("rq.vq_layers.", code_books())
    torch.save({"args": Payload(marker), "epoch": 1, "state_dict": state}, folder / "planted.pth")
    return folder / "planted.pth"


# framework -> (writer, the tokenizer's spelling, extra new tokens)
FRAMEWORKS = {
    "lcrec": (write_lcrec, "letter", ()),
    "minionerec": (write_minionerec, "letter1", dedup_tokens()),
    "grid": (write_grid, "letter", ()),
    "etegrec": (write_etegrec, "letter", ()),
    "openonerec": (write_openonerec, "s_letter", ("<|sid_begin|>", "<|sid_end|>")),
    "semantic_ids_llm": (
        write_semantic_ids_llm,
        "flat",
        ("<|rec|>", "<|sid_start|>", "<|sid_end|>"),
    ),
}


def write_all(out: Path) -> dict[str, dict[str, Path]]:
    """Every framework's files and a model spelled as it spells (``out/<name>/``), and our
    own sidecar route (``out/sidecar/``)."""
    write_sidecar(out / "sidecar")
    found = {}
    for name, (writer, spelling, extra) in FRAMEWORKS.items():
        files = writer(out / name / "files")
        files["model"] = write_model(out / name / "model", spelling, "structured", extra)
        found[name] = files
    return found


if __name__ == "__main__":
    for name, files in write_all(Path(sys.argv[1])).items():
        print(name, {k: str(v) for k, v in files.items()})
