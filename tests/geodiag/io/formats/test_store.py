"""geodiag.io.formats.store: open_store over one safetensors file, a sharded index, a torch pickle,
and the folders it refuses. Every read is compared with the array that was written
(numpy, or torch's own tensor); the errors name the file at fault.

The layouts written by other stacks' real libraries (DCP, FSDP, DeepSpeed ZeRO, the Hub
cache, a Git LFS pointer) are tests/geodiag/io/test_wild_checkpoints.py's.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import xxhash

from geodiag.errors import InputError
from geodiag.io.checkpoint import open_checkpoint
from geodiag.io.formats.registry import open_store
from geodiag.io.formats.safetensors import save_file
from geodiag.io.sources.options import ReadOptions

EMB, LAYER = "model.embed_tokens.weight", "model.layers.0.mlp.weight"


@pytest.fixture
def arrays():
    rng = np.random.default_rng(0)
    return {
        EMB: rng.normal(size=(40, 8)).astype(np.float32),
        LAYER: rng.normal(size=(8, 8)).astype(np.float32),
    }


def write_sharded(root, arrays, shards=None) -> None:
    """Each tensor in its own shard (or as ``shards`` says), listed by the index."""
    root.mkdir(parents=True, exist_ok=True)
    shards = shards or {
        name: f"model-0000{i + 1}-of-00002.safetensors" for i, name in enumerate(arrays)
    }
    for shard in sorted(set(shards.values())):
        save_file({n: a for n, a in arrays.items() if shards[n] == shard}, root / shard)
    (root / "model.safetensors.index.json").write_text(json.dumps({"weight_map": shards}))


# ---- one safetensors file --------------------------------------------------------------


@pytest.mark.parametrize("given", ["file", "folder"])
def test_one_file_reads_the_rows_written(tmp_path, arrays, given):
    save_file(arrays, tmp_path / "model.safetensors")
    store = open_store(tmp_path / "model.safetensors" if given == "file" else tmp_path)
    assert store.description == "safetensors file model.safetensors"
    assert sorted(store.names()) == sorted(arrays)
    assert store.shape(EMB) == (40, 8) and store.dtype(EMB) == "F32"
    assert store.file_of(EMB) == tmp_path / "model.safetensors"
    ids = np.array([39, 0, 7, 7, 12])  # any order, repeats
    got = store.read_rows(EMB, ids)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, arrays[EMB][ids].astype(np.float64))
    got32 = store.read_rows(EMB, ids, float32=True)
    assert got32.dtype == np.float32
    np.testing.assert_array_equal(got32, arrays[EMB][ids])
    np.testing.assert_array_equal(store.read_block(EMB, 5, 9), arrays[EMB][5:9])
    with pytest.raises(InputError, match="no tensor named 'lm_head.weight'"):
        store.shape("lm_head.weight")


def test_a_folder_with_one_other_safetensors_file_reads_it_not_the_codebooks(tmp_path, arrays):
    save_file(arrays, tmp_path / "weights.safetensors")
    save_file({"a": np.ones((4, 2), np.float32)}, tmp_path / "codebooks.safetensors")
    store = open_store(tmp_path)
    assert store.file_of(EMB) == tmp_path / "weights.safetensors"
    save_file(arrays, tmp_path / "more.safetensors")  # two candidates: which is the model?
    with pytest.raises(InputError, match="no model weights found"):
        open_store(tmp_path)


# ---- a sharded index -------------------------------------------------------------------


def test_sharded_index_reads_each_tensor_from_its_shard(tmp_path, arrays):
    write_sharded(tmp_path, arrays)
    save_file({EMB: np.zeros((40, 8), np.float32)}, tmp_path / "model.safetensors")  # stale
    store = open_store(tmp_path)  # the index wins over a model.safetensors beside it
    assert store.description == "sharded safetensors (2 shards, model.safetensors.index.json)"
    assert store.file_of(LAYER).name == "model-00002-of-00002.safetensors"
    for name, a in arrays.items():
        np.testing.assert_array_equal(store.read_rows(name, np.arange(len(a))), a)
    # The digests cover exactly the shards that were read, each over the bytes read.
    assert [p.rsplit("/", 1)[-1] for p in store.digests()] == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ]


def test_sharded_reads_only_the_embedding_shard(make_ckpt):
    root = make_ckpt("random", sharded=True)
    ckpt = open_checkpoint(root)
    ckpt.read_rows(ckpt.matrices[0], ckpt.new.ids)
    assert [
        p for p in ckpt.digests() if "model-00002-of" in p
    ] == []  # the other shard was never opened


def test_sharded_index_naming_missing_file(make_ckpt):
    root = make_ckpt("random", sharded=True)
    (root / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(
        InputError, match="names shard 'model-00002-of-00002.safetensors', which is missing"
    ):
        open_checkpoint(root)


def test_a_shard_that_lacks_the_tensor_its_index_names(tmp_path, arrays):
    write_sharded(tmp_path, arrays, {EMB: "a.safetensors", LAYER: "a.safetensors"})
    save_file({EMB: arrays[EMB]}, tmp_path / "a.safetensors")  # LAYER is not in it
    store = open_store(tmp_path)
    with pytest.raises(InputError, match=f"tensor '{LAYER}' is here, but the file lacks it"):
        store.shape(LAYER)


@pytest.mark.parametrize("text", ["{not json", '{"metadata": {}}', '{"weight_map": [1]}'])
def test_an_invalid_shard_index_names_itself(tmp_path, arrays, text):
    write_sharded(tmp_path, arrays)
    (tmp_path / "model.safetensors.index.json").write_text(text)
    with pytest.raises(InputError) as e:
        open_store(tmp_path)
    assert e.value.where == str(tmp_path / "model.safetensors.index.json")
    assert "not a valid shard index (needs a 'weight_map' object)" in e.value.problem


# ---- a torch pickle --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "name"),
    [
        (torch.float32, "F32"),
        (torch.float16, "F16"),
        (torch.bfloat16, "BF16"),
        (torch.float64, "F64"),
        # torch converts its own float8 (no ml_dtypes needed on that path)
        (torch.float8_e5m2, "F8_E5M2"),
    ],
)
def test_torch_pickle_reads_what_torch_holds(tmp_path, dtype, name):
    x = (torch.randn(10, 4, generator=torch.Generator().manual_seed(0)) * 3).to(dtype)
    path = tmp_path / "pytorch_model.bin"
    torch.save({EMB: x}, path)
    store = open_store(tmp_path)
    assert store.description == "torch state dict pytorch_model.bin"
    assert store.dtype(EMB) == name and store.shape(EMB) == (10, 4)
    want = x.to(torch.float64).numpy()
    got = store.read_rows(EMB, np.array([9, 2]))
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, want[[9, 2]])
    # float32 where it is exact (not F64)
    got32 = store.read_rows(EMB, np.array([9, 2]), float32=True)
    assert got32.dtype == (np.float64 if dtype == torch.float64 else np.float32)
    np.testing.assert_array_equal(got32, want[[9, 2]])
    np.testing.assert_array_equal(store.read_block(EMB, 3, 6), want[3:6])
    want = xxhash.xxh3_128(path.read_bytes()).hexdigest()  # the whole file, as reported
    assert store.digests() == {str(path): f"xxh3_128:{want}"}
    with pytest.raises(InputError, match=r"row ids \[10\] out of range for tensor .* with 10 rows"):
        store.read_rows(EMB, np.array([10]))


def test_torch_state_dict_weights_only(tmp_path):
    emb = torch.randn(40, 8)
    torch.save({"model.embed_tokens.weight": emb}, tmp_path / "sd.bin")
    ckpt = open_checkpoint(tmp_path / "sd.bin", ReadOptions(new_tokens=(30, 40)))
    np.testing.assert_allclose(
        ckpt.read_rows(ckpt.matrices[0], ckpt.new.ids), emb[30:].double().numpy()
    )


@pytest.mark.parametrize("suffix", [".pt", ".pth"])
def test_a_wrapped_state_dict_is_unwrapped(tmp_path, suffix):
    x = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    torch.save({"state_dict": {EMB: x}, "epoch": 3}, tmp_path / f"ckpt{suffix}")
    store = open_store(tmp_path / f"ckpt{suffix}")
    assert store.names() == [EMB]
    np.testing.assert_array_equal(store.read_rows(EMB, np.array([3, 0])), x[[3, 0]].numpy())


def test_a_pickle_that_is_not_a_state_dict(tmp_path):
    torch.save([torch.zeros(2)], tmp_path / "list.pt")
    with pytest.raises(InputError, match="not a state dict"):
        open_store(tmp_path / "list.pt")


class Evil:
    def __reduce__(self):
        return (print, ("pwned",))


def test_unsafe_pickle_refused(tmp_path):
    torch.save({"model.embed_tokens.weight": torch.zeros(3, 2), "x": Evil()}, tmp_path / "evil.pt")
    with pytest.raises(InputError, match="refused: the pickle needs arbitrary code"):
        open_checkpoint(tmp_path / "evil.pt", ReadOptions(new_tokens=(1, 3)))


def test_safetensors_are_preferred_over_a_pickle_beside_them(tmp_path, arrays):
    save_file(arrays, tmp_path / "model.safetensors")
    torch.save({EMB: torch.zeros(40, 8)}, tmp_path / "pytorch_model.bin")
    assert open_store(tmp_path).description == "safetensors file model.safetensors"


# ---- what open_store refuses -----------------------------------------------------------


def test_a_missing_path_and_an_unknown_format(tmp_path):
    with pytest.raises(InputError, match="no such file or folder"):
        open_store(tmp_path / "absent")
    (tmp_path / "model.npz").write_bytes(b"PK")
    with pytest.raises(InputError, match=r"unknown weights format: geodiag reads ") as file:
        open_store(tmp_path / "model.npz")
    with pytest.raises(InputError, match="no model weights found: geodiag reads ") as folder:
        open_store(tmp_path)  # a folder with nothing geodiag reads
    for message in (str(file.value), str(folder.value)):
        listed = message.split("geodiag reads ", 1)[1]
        # the formats read are listed (from the registry), those only recognised are not
        for read in ("safetensors", "sharded safetensors", "GGUF", "torch pickle", "Meta Llama"):
            assert f" {read}," in f" {listed}" or f" {read} " in f" {listed}", (read, message)
        for unread in ("ONNX", "TensorFlow", "Flax", "sharded .bin", "PEFT adapter"):
            assert unread not in listed, (unread, message)


@pytest.mark.parametrize(
    ("name", "what"),
    [
        ("pytorch_model.bin.index.json", "sharded .bin checkpoints are not read"),
        ("tf_model.h5", "a TensorFlow/Keras checkpoint (tf_model.h5), not read"),
        ("flax_model.msgpack", "a Flax checkpoint (flax_model.msgpack), not read"),
        ("model.onnx", "an ONNX export (model.onnx), not read"),
    ],
)
def test_layouts_without_a_reader_say_how_to_convert(tmp_path, name, what):
    (tmp_path / name).write_text("{}")
    with pytest.raises(InputError) as e:
        open_store(tmp_path)
    assert e.value.where == str(tmp_path) and e.value.problem.startswith(what)
    assert "safetensors" in e.value.problem  # the way out
