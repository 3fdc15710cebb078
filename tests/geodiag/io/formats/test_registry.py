"""Every registered format (geodiag.io.formats.registry.formats) is recognised by what
the path holds and read on disk and behind a URL (range_server.py, a real server
process), or prints the reason its entry gives: one case per format, and a format
registered without a case fails here.

A case writes an instance of its format and the rows it holds (the reference, from the
writer: safetensors, llama.cpp's gguf-py, torch.save, torch.distributed.checkpoint,
PEFT's merge, DeepSpeed's own zero_to_fp32 output); None for a format not read."""

from __future__ import annotations

import hashlib
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from geodiag.cli import app
from geodiag.errors import InputError
from geodiag.io.checkpoint import open_checkpoint
from geodiag.io.formats.registry import formats, recognise
from geodiag.io.formats.safetensors import SafetensorsFile
from geodiag.io.sources.options import ReadOptions
from tests.geodiag.geodiag_fixtures import base_rows, planted_new_rows, write_checkpoint, write_gguf
from tests.geodiag.io.sources.test_remote import serve  # noqa: F401

torch = pytest.importorskip("torch")
pytest.importorskip("gguf")
runner = CliRunner()
RELEASE = Path(__file__).resolve().parents[1] / "release_data" / "deepspeed" / "0.16.9"


def _emb() -> np.ndarray:
    base = base_rows()
    return np.concatenate([base, planted_new_rows("grounded", base)]).astype(np.float32)


def _safetensors(root: Path, sharded: bool):
    folder = write_checkpoint(root / "ck", _emb()[300:], sharded=sharded)
    return folder, None, _emb()


def _gguf(root: Path, blob: bool):
    (root / "ck").mkdir(parents=True)
    path = write_gguf(root / "ck" / "model.gguf", _emb())
    if blob:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        path = path.rename(root / "ck" / f"sha256-{digest}")
    return path, path.name, _emb()


def _ollama(root: Path):
    """Ollama's store: the manifest naming the GGUF blob."""
    from tests.geodiag.io.formats.test_ollama import write_ollama

    (root / "ck").mkdir(parents=True)
    gguf_file = write_gguf(root / "model.gguf", _emb())
    manifest = write_ollama(root / "ck", gguf_file)
    return manifest, str(manifest.relative_to(root / "ck")), _emb()


def _torch(root: Path, wrapped: bool):
    (root / "ck").mkdir(parents=True)
    state = {"model.embed_tokens.weight": torch.from_numpy(_emb())}
    name = "ckpt.pt" if wrapped else "pytorch_model.bin"
    torch.save({"model": state, "iter_num": 1} if wrapped else state, root / "ck" / name)
    return root / "ck", name, _emb()


def _litgpt(root: Path):
    """litgpt's folder: lit_model.pth (litgpt's names) beside model_config.yaml."""
    (root / "ck").mkdir(parents=True)
    state = {"transformer.wte.weight": torch.from_numpy(_emb())}
    torch.save(state, root / "ck" / "lit_model.pth")
    (root / "ck" / "model_config.yaml").write_text(f"n_embd: {_emb().shape[1]}\n")
    return root / "ck", None, _emb()


def _torchtune(root: Path):
    """torchtune's epoch_N/: one model-00001-of-00001.bin shard."""
    (root / "ck").mkdir(parents=True)
    state = {"model.embed_tokens.weight": torch.from_numpy(_emb())}
    torch.save(state, root / "ck" / "model-00001-of-00001.bin")
    return root / "ck", None, _emb()


def _dcp(root: Path):
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():  # "assuming the intent is to save in a single process"
        warnings.simplefilter("ignore", UserWarning)
        dcp.save(
            {"model.embed_tokens.weight": torch.from_numpy(_emb())}, checkpoint_id=str(root / "ck")
        )
    return root / "ck", None, _emb()


def _zero(root: Path):
    folder = shutil.copytree(RELEASE / "zero2", root / "ck")
    ref = SafetensorsFile(RELEASE / "zero2_consolidated.safetensors")
    name = next(n for n in ref.keys() if "embed" in n)
    return folder, None, ref.read(name)


def _model_states(root: Path):
    """ZeRO-3's rank-0 model states, given as a file: placeholders, not the weights."""
    shutil.copytree(RELEASE.parent / "0.16.9" / "zero3", root / "ck")
    name = "global_step1/zero_pp_rank_0_mp_rank_00_model_states.pt"
    return root / "ck" / name, name, None


def _adapter(root: Path):
    peft = pytest.importorskip("peft")
    from tests.geodiag.io.formats.test_peft_adapter import NEW, _write_base
    from tests.geodiag.io.formats.test_peft_adapter import _adapter as write_adapter

    base = _write_base(root, tied=True, resized=True)
    cfg = peft.LoraConfig(r=4, target_modules=["q_proj"], trainable_token_indices=NEW)
    folder, merged = write_adapter(root, base, cfg, "ck")
    return folder, None, merged.get_input_embeddings().weight.double().detach().numpy()


def _meta(root: Path, ranks: int):
    """Meta's layout: params.json beside consolidated.NN.pth, named Meta's way."""
    (root / "ck").mkdir(parents=True)
    emb = _emb()
    (root / "ck" / "params.json").write_text(f'{{"dim": {emb.shape[1]}, "vocab_size": {len(emb)}}}')
    state = {
        "tok_embeddings.weight": torch.from_numpy(emb),
        "layers.0.attention.wq.weight": torch.zeros(emb.shape[1], emb.shape[1]),
        "output.weight": torch.from_numpy(emb[::-1].copy()),
    }
    for rank in range(ranks):
        torch.save(state, root / "ck" / f"consolidated.{rank:02d}.pth")
    return root / "ck", None, emb if ranks == 1 else None


def _unread(file: str, inside: str = "") -> Callable[[Path], tuple]:
    def write(root: Path):
        (root / "ck" / inside).mkdir(parents=True)
        (root / "ck" / inside / file).write_bytes(b"not read")
        return root / "ck", None, None

    return write


# format name -> its case: (root) -> (the path that holds it, the name a URL gives for a
# file, None for the folder's URL; the embedding rows it holds, None when not read)
CASES: dict[str, Callable[[Path], tuple]] = {
    "PEFT adapter": _adapter,
    "GGUF by its bytes": lambda root: _gguf(root, blob=True),
    "Ollama": _ollama,
    "GGUF": lambda root: _gguf(root, blob=False),
    "sharded safetensors": lambda root: _safetensors(root, sharded=True),
    "safetensors": lambda root: _safetensors(root, sharded=False),
    "DeepSpeed model states, alone": _model_states,
    "training checkpoint": lambda root: _torch(root, wrapped=True),
    "litgpt": _litgpt,
    "torchtune .bin shards": _torchtune,
    "torch pickle": lambda root: _torch(root, wrapped=False),
    "torch.distributed.checkpoint": _dcp,
    "DeepSpeed ZeRO": _zero,
    "Meta Llama": lambda root: _meta(root, ranks=1),
    "Meta Llama, model-parallel": lambda root: _meta(root, ranks=2),
    "DeepSpeed, other layouts": _unread("mp_rank_00_model_states.pt", "global_step3"),
    "sharded .bin": _unread("pytorch_model.bin.index.json"),
    "TensorFlow": _unread("tf_model.h5"),
    "Flax": _unread("flax_model.msgpack"),
    "ONNX": _unread("model.onnx"),
}


FORMATS = {fmt.name: fmt for fmt in formats()}


def test_every_registered_format_has_a_case_and_a_name_of_its_own():
    assert list(CASES) == list(FORMATS) == [fmt.name for fmt in formats()]


def _input_rows(target: str | Path, ids: np.ndarray, n_rows: int, **kw) -> np.ndarray:
    """The input embedding's rows ``ids`` as open_checkpoint reads them (the last row named
    new where nothing beside the weights says which are)."""
    try:
        ckpt = open_checkpoint(target, ReadOptions(**kw))
    except InputError:  # no tokenizer or sidecar beside: which rows are new is told
        ckpt = open_checkpoint(target, ReadOptions(new_tokens=(n_rows - 1, n_rows), **kw))
    matrix = next(m for m in ckpt.matrices if m.role == "input")
    return ckpt.read_rows(matrix, ids)


def _said(args: list[str]) -> str:
    res = runner.invoke(app, ["check", *args])
    assert res.exit_code == 2, res.output
    return " ".join(res.output.split())


@pytest.mark.parametrize("name", list(CASES))
def test_recognised_by_content_and_read_on_disk_and_by_url(name, tmp_path, serve):  # noqa: F811
    fmt = FORMATS[name]
    path, file, rows = CASES[name](tmp_path / "w")
    found = recognise(path)
    assert found is not None and found[0] is fmt
    ids = np.arange(0, 0 if rows is None else len(rows), 7)
    # on disk: the rows as written, or the way out
    if fmt.open is None and not fmt.over_base:
        assert " ".join(fmt.way_out(found[1]).split()) in _said([str(path)])
    else:
        np.testing.assert_allclose(_input_rows(path, ids, len(rows)), rows[ids], rtol=0, atol=1e-6)
    # by URL: the same rows by byte ranges, or the entry's reason
    server = serve(tmp_path / "w")
    url = f"{server.url}/ck" + (f"/{file}" if file else "")
    if fmt.remote or fmt.url is None:
        if name == "DeepSpeed, other layouts":  # a URL shows only 'latest', as ZeRO's
            (path / "latest").write_text("global_step3")
        assert " ".join(fmt.remote.split()) in _said([url])
    else:
        base = {"base": str(tmp_path / "w" / "base-tied-resized")} if fmt.over_base else {}
        np.testing.assert_allclose(
            _input_rows(url, ids, len(rows), **base), rows[ids], rtol=0, atol=1e-6
        )


def test_the_messages_name_each_format_read_once(tmp_path):
    """'no model weights found' lists what geodiag reads, each name once: a GGUF blob is
    GGUF (the docs table keeps its own row)."""
    said = _said([str(tmp_path)])
    listed = said.split("geodiag reads ", 1)[1].split(" (docs/stacks.md")[0]
    names = listed.replace(" or ", ", ").split(", ")
    assert len(names) == len(set(names)) and "GGUF" in names, said
    assert "GGUF by its bytes" not in said
