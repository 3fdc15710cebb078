"""PEFT adapter folders read over their base: rows must equal ``merge_and_unload()``'s.

Every adapter here is written by PEFT itself on a tiny Llama (so the key names are
PEFT's, not our guess), its trainable tensors moved by seeded noise as training
would, then merged by PEFT for the reference rows.

Tolerances: trainable tokens and ``modules_to_save`` are copies of stored float32
values, so the rows match exactly. LoRA merges in float32: PEFT forms B @ A (a sum
of r products), scales it and adds it to E, each rounding to float32; geodiag does
the same sum exactly in float64. The float32 error per entry is then at most
u * (|E + delta| + (r + 2) * scaling * (|B| @ |A|)^T) with u = 2^-24 (r + 2 roundings
of the dot product and the scaling, one of the sum); the tests allow 2u.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tiny_models import tiny_lm
from typer.testing import CliRunner

from geodiag.analysis.audit import audit
from geodiag.cli import app
from geodiag.io.checkpoint import open_checkpoint
from geodiag.io.sources.options import ReadOptions

pytestmark = pytest.mark.filterwarnings("ignore")  # PEFT's and transformers' own advice

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")

V0, D, N_NEW = 48, 16, 6  # base vocabulary, hidden size, new tokens
EPS32 = 2.0**-23  # 2u: twice float32's unit roundoff


def _tiny(tied: bool, vocab: int = V0):
    return tiny_lm(vocab, hidden_size=D, tied=tied, seed=0)


def _write_base(root: Path, tied: bool, resized: bool) -> Path:
    """A base folder; ``resized``: new tokens already added (mean rows), as users save it."""
    model = _tiny(tied)
    if resized:
        model.resize_token_embeddings(V0 + N_NEW, mean_resizing=True)
    path = root / f"base-{'tied' if tied else 'untied'}-{'resized' if resized else 'orig'}"
    model.save_pretrained(path)
    return path


def _train(model, seed: int = 1) -> None:
    """Stand-in for training: move every trainable tensor by seeded noise."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=g) * 0.2)


def _adapter(root: Path, base: Path, config, name: str, resize_to: int | None = None):
    """Write a real PEFT adapter over ``base`` and return (folder, merged model)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(base)
    if resize_to is not None:
        model.resize_token_embeddings(resize_to, mean_resizing=True)
    pm = peft.get_peft_model(model, config)
    _train(pm)
    out = root / name
    pm.save_pretrained(out)
    return out, pm.merge_and_unload()


def _rows(folder: Path, base: Path | None, ids, **kw) -> dict[str, np.ndarray]:
    ckpt = open_checkpoint(folder, ReadOptions(base=base, **kw))
    return {m.role: ckpt.read_rows(m, np.asarray(ids)) for m in ckpt.matrices}


def _merged(model, ids) -> dict[str, np.ndarray]:
    ids = torch.as_tensor(np.asarray(ids))
    out = {"input": model.get_input_embeddings().weight[ids].double().detach().numpy()}
    head = model.get_output_embeddings().weight
    if head.data_ptr() != model.get_input_embeddings().weight.data_ptr():
        out["output"] = head[ids].double().detach().numpy()
    return out


ALL = np.arange(V0 + N_NEW)
NEW = list(range(V0, V0 + N_NEW))


@pytest.mark.parametrize("tied", [True, False])
def test_lora_with_trainable_tokens_equals_merge(tmp_path, tied):
    base = _write_base(tmp_path, tied, resized=True)
    cfg = peft.LoraConfig(r=4, target_modules=["q_proj"], trainable_token_indices=NEW)
    folder, merged = _adapter(tmp_path, base, cfg, "tt-lora")
    got = _rows(folder, None, ALL)  # base from adapter_config.json: a local folder
    want = _merged(merged, ALL)
    assert set(got) == set(want) == ({"input"} if tied else {"input", "output"})
    for role in got:  # an untied head keeps its base rows: the list form trains the input only
        np.testing.assert_array_equal(got[role], want[role])
    ckpt = open_checkpoint(folder)
    assert ckpt.new.source == "adapter" and ckpt.new.ids.tolist() == NEW
    assert ckpt.adapter["embedding_changes"] == {"model.embed_tokens.weight": "trainable tokens"}


def test_untied_trainable_tokens_with_their_own_head_rows(tmp_path):
    base = _write_base(tmp_path, tied=False, resized=True)
    cfg = peft.LoraConfig(
        r=4,
        target_modules=["q_proj"],
        trainable_token_indices={"embed_tokens": NEW, "lm_head": NEW},
    )
    folder, merged = _adapter(tmp_path, base, cfg, "tt-dict")
    got, want = _rows(folder, None, ALL), _merged(merged, ALL)
    assert set(got) == set(want) == {"input", "output"}
    for role in got:
        np.testing.assert_array_equal(got[role], want[role])
    assert not np.allclose(got["input"][NEW], got["output"][NEW])


@pytest.mark.parametrize(
    "indices",
    [NEW, {"embed_tokens": NEW}, {"embed_tokens": NEW, "lm_head": NEW}],
    ids=["list", "dict", "head-too"],
)
@pytest.mark.parametrize("tied", [True, False])
def test_lora_trainable_tokens_over_a_base_resized_in_memory(tmp_path, tied, indices):
    """Tokens added after loading the base: PEFT saves the resized matrix under the
    wrapper, ``model.embed_tokens.token_adapter.base_layer.weight``, and for a tied head
    its own ``lm_head.token_adapter.*`` copy (the untied head: ``lm_head.weight``). The
    tied copy shares the embedding's delta and indices, and merging writes them into the
    one shared matrix: the merged head is the merged embedding. Before: exit 2 ("the base
    has no tensor 'lm_head.token_adapter.weight'")."""
    from safetensors import safe_open

    base = _write_base(tmp_path, tied, resized=False)
    cfg = peft.LoraConfig(r=4, target_modules=["q_proj"], trainable_token_indices=indices)
    folder, merged = _adapter(tmp_path, base, cfg, "tt-mem", resize_to=V0 + N_NEW)
    with safe_open(str(folder / "adapter_model.safetensors"), "np") as f:
        keys = set(f.keys())
    prefix = "base_model.model."
    assert prefix + "model.embed_tokens.token_adapter.base_layer.weight" in keys
    head_too = isinstance(indices, dict) and "lm_head" in indices
    assert (prefix + "lm_head.token_adapter.trainable_tokens_delta" in keys) == (tied or head_too)
    got, want = _rows(folder, None, ALL), _merged(merged, ALL)
    assert set(got) == set(want) == ({"input"} if tied else {"input", "output"})
    for role in got:
        np.testing.assert_array_equal(got[role], want[role])
    assert not np.allclose(got["input"][NEW], got["input"][NEW].mean(axis=0))  # trained rows
    ckpt = open_checkpoint(folder)
    assert ckpt.new.source == "adapter" and ckpt.new.ids.tolist() == NEW
    assert ckpt.matrices[0].n_rows == V0 + N_NEW and ckpt.new.base_vocab_size == V0
    changes = ckpt.adapter["embedding_changes"]
    assert changes["model.embed_tokens.weight"] == "base_layer, trainable tokens"
    res = _run("check", folder, "--base", base, "--permutations", 10)
    assert res.exit_code in (0, 1), res.output


@pytest.mark.parametrize("resized", [True, False], ids=["on-disk", "in-memory"])
def test_tied_head_with_its_own_token_indices_exits_2(tmp_path, resized):
    """Other indices for a tied head: PEFT trains a second delta and merges both into the
    shared matrix. Before: over a base resized on disk, exit 0/1 on input rows that were
    not the merged ones; resized in memory, exit 2 for the key name."""
    base = _write_base(tmp_path, tied=True, resized=resized)
    indices = {"embed_tokens": NEW, "lm_head": NEW[:3]}
    cfg = peft.LoraConfig(r=4, target_modules=["q_proj"], trainable_token_indices=indices)
    resize_to = None if resized else V0 + N_NEW
    folder, _ = _adapter(tmp_path, base, cfg, "tt-own-head", resize_to=resize_to)
    res = _run("check", folder, "--permutations", 10)
    assert res.exit_code == 2, res.output
    assert "adapter_config.json" in res.output and "tied head 'lm_head'" in res.output


@pytest.mark.parametrize("tied", [True, False])
def test_trainable_tokens_adapter_over_the_unresized_base(tmp_path, tied):
    """The common route: base on disk has V0 rows; tokens added in memory; only the delta
    is saved. Rows past the base's end come from the adapter alone."""
    base = _write_base(tmp_path, tied, resized=False)
    cfg = peft.TrainableTokensConfig(token_indices=NEW)
    folder, merged = _adapter(tmp_path, base, cfg, "tt-only", resize_to=V0 + N_NEW)
    got, want = _rows(folder, None, ALL), _merged(merged, ALL)
    np.testing.assert_array_equal(got["input"], want["input"])
    ckpt = open_checkpoint(folder)
    assert ckpt.matrices[0].n_rows == V0 + N_NEW and ckpt.new.base_vocab_size == V0
    if not tied:  # PEFT saved the resized embedding, not the untied head's new rows
        assert set(got) == {"input"} and ckpt.head_left_out.tensor == "lm_head.weight"
        kinds = {f.kind: f for f in audit(ckpt)}
        assert "the head is not analyzed" in kinds["head_rows"].message
        assert "adapter_head_not_trained" in kinds


@pytest.mark.parametrize("tied", [True, False])
def test_modules_to_save_equals_merge(tmp_path, tied):
    base = _write_base(tmp_path, tied, resized=True)
    cfg = peft.LoraConfig(
        r=4, target_modules=["q_proj"], modules_to_save=["embed_tokens", "lm_head"]
    )
    folder, merged = _adapter(tmp_path, base, cfg, "mts")
    got, want = _rows(folder, None, ALL, new_tokens=(V0, V0 + N_NEW)), _merged(merged, ALL)
    # PEFT trains a separate copy of each module: the merged head is untied even when
    # the base was tied, and geodiag analyzes it as its own matrix.
    assert set(got) == set(want) == {"input", "output"}
    for role in got:
        np.testing.assert_array_equal(got[role], want[role])


def _lora_tolerance(folder: Path, got: np.ndarray) -> np.ndarray:
    """The float32 merge's error bound per entry (module docstring), from the adapter's own
    factors and the embedding's r and alpha."""
    from geodiag.io.formats.safetensors import SafetensorsFile

    f = SafetensorsFile(folder / "adapter_model.safetensors")
    a = f.read("base_model.model.model.embed_tokens.lora_embedding_A")  # (r, V)
    b = f.read("base_model.model.model.embed_tokens.lora_embedding_B")  # (d, r)
    cfg = json.loads((folder / "adapter_config.json").read_text())
    r, alpha = a.shape[0], cfg["alpha_pattern"]["embed_tokens"]
    scaling = alpha / np.sqrt(r)  # use_rslora
    return EPS32 * (np.abs(got) + (r + 2) * scaling * (np.abs(b) @ np.abs(a)).T)  # (V, d)


@pytest.mark.parametrize("tied", [True, False])
def test_lora_on_the_embedding_equals_merge(tmp_path, tied):
    """rsLoRA with rank and alpha patterns: the scaling must use the embedding's own r and
    alpha, not the config's defaults. PEFT saves the resized base layer alongside."""
    base = _write_base(tmp_path, tied, resized=False)
    cfg = peft.LoraConfig(
        r=2,
        lora_alpha=3,
        use_rslora=True,
        target_modules=["embed_tokens", "q_proj"],
        rank_pattern={"embed_tokens": 6},
        alpha_pattern={"embed_tokens": 5},
    )
    folder, merged = _adapter(tmp_path, base, cfg, "lora-emb", resize_to=V0 + N_NEW)
    got, want = _rows(folder, None, ALL, new_tokens=(V0, V0 + N_NEW)), _merged(merged, ALL)
    ckpt = open_checkpoint(folder, ReadOptions(new_tokens=(V0, V0 + N_NEW)))
    assert ckpt.adapter["embedding_changes"]["model.embed_tokens.weight"] == "base_layer, lora"
    tol = _lora_tolerance(folder, got["input"])
    assert np.all(np.abs(got["input"] - want["input"]) <= tol)
    # The LoRA delta is not negligible: a reader that skipped it would fail the tolerance.
    unmerged = ckpt.store.base.read_rows("model.embed_tokens.weight", np.arange(V0))
    assert np.abs(got["input"][:V0] - unmerged).max() > 100 * tol.max()


def test_adapter_bin_weights(tmp_path):
    """``adapter_model.bin`` goes through the weights_only torch loader."""
    base = _write_base(tmp_path, tied=True, resized=True)
    cfg = peft.LoraConfig(r=4, target_modules=["q_proj"], trainable_token_indices=NEW)
    model = transformers.AutoModelForCausalLM.from_pretrained(base)
    pm = peft.get_peft_model(model, cfg)
    _train(pm)
    folder = tmp_path / "bin"
    pm.save_pretrained(folder, safe_serialization=False)
    assert (folder / "adapter_model.bin").is_file()
    got, want = _rows(folder, None, ALL), _merged(pm.merge_and_unload(), ALL)
    np.testing.assert_array_equal(got["input"], want["input"])


# ---- the command line and bad adapters -------------------------------------------------


@pytest.fixture
def tt_adapter(tmp_path):
    base = _write_base(tmp_path, tied=True, resized=True)
    cfg = peft.LoraConfig(r=4, target_modules=["q_proj"], trainable_token_indices=NEW)
    folder, _ = _adapter(tmp_path, base, cfg, "tt")
    return folder, base


def _run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_cli_reads_an_adapter_with_and_without_base(tt_adapter, tmp_path):
    folder, base = tt_adapter
    res = _run("metrics", folder, "--json")
    assert res.exit_code == 0, res.output
    rep = json.loads(res.output)
    assert rep["new_token_source"] == "adapter" and rep["n_new_tokens"] == N_NEW
    assert rep["adapter"]["base"] == str(base)
    assert _run("check", folder, "--base", base).exit_code in (0, 1)
    # A hub id in adapter_config.json: geodiag downloads nothing and asks for --base.
    cfg_path = folder / "adapter_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["base_model_name_or_path"] = "HuggingFaceTB/SmolLM2-135M"
    cfg_path.write_text(json.dumps(cfg))
    res = _run("metrics", folder)
    assert res.exit_code == 2
    assert "adapter_config.json" in res.output and "--base" in res.output
    assert _run("metrics", folder, "--base", base).exit_code == 0


def _edit_config(folder: Path, **changes) -> None:
    path = folder / "adapter_config.json"
    cfg = json.loads(path.read_text())
    cfg.update(changes)
    path.write_text(json.dumps(cfg))


def test_bad_adapters_exit_2_naming_the_file(tt_adapter, tiny_lm_dir):
    folder, base = tt_adapter
    # Trainable-token indices out of range.
    _edit_config(folder, trainable_token_indices=[1, 2, 3, 4, 5, 10_000])
    res = _run("metrics", folder)
    assert res.exit_code == 2 and "adapter_config.json" in res.output and "10000" in res.output
    # The config lists fewer indices than the weights hold rows.
    _edit_config(folder, trainable_token_indices=NEW[:3])
    res = _run("metrics", folder)
    assert res.exit_code == 2 and "adapter_model.safetensors" in res.output
    _edit_config(folder, trainable_token_indices=NEW)
    # A base with another hidden size.
    other = tiny_lm_dir(
        V0 + N_NEW, name="other-base", hidden_size=8, intermediate_size=16, tied=False
    )
    res = _run("metrics", folder, "--base", other)
    assert res.exit_code == 2 and "adapter_model.safetensors" in res.output
    assert "hidden size is 8" in res.output
    # Weights missing.
    (folder / "adapter_model.safetensors").unlink()
    res = _run("metrics", folder, "--base", base)
    assert res.exit_code == 2 and "adapter weights missing" in res.output


def test_lora_rank_disagreement_exits_2(tmp_path):
    base = _write_base(tmp_path, tied=True, resized=False)
    cfg = peft.LoraConfig(r=4, target_modules=["embed_tokens"])
    folder, _ = _adapter(tmp_path, base, cfg, "lora", resize_to=V0 + N_NEW)
    _edit_config(folder, r=8)
    res = _run("metrics", folder, "--new-tokens", f"{V0}:{V0 + N_NEW}")
    assert res.exit_code == 2
    assert "adapter_config.json" in res.output and "rank 8" in res.output


def test_drift_between_base_and_adapter(tt_adapter):
    """drift BASE ADAPTER: how far training moved the new rows from their init."""
    folder, base = tt_adapter
    res = _run("drift", base, folder, "--json", "--new-tokens", f"{V0}:{V0 + N_NEW}")
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)[0]["drift"]
    assert d["relative_change"] > 0.1  # the adapter moved the rows by noise of std 0.2


def test_only_embedding_rows_are_read_from_base_and_adapter(tt_adapter, monkeypatch):
    """The base's other tensors (attention, MLP) are never read: every byte range read
    belongs to the embedding, the head or the adapter's embedding tensors."""
    from geodiag.io.formats import safetensors as sf

    folder, _ = tt_adapter
    read: set[str] = set()
    original_raw, original_block = sf.SafetensorsFile._raw_rows, sf.SafetensorsFile.read_block

    def raw_rows(self, info, rows):
        read.add(info.name)
        return original_raw(self, info, rows)

    def read_block(self, name, start, stop, float32=False):
        read.add(name)
        return original_block(self, name, start, stop, float32)

    monkeypatch.setattr(sf.SafetensorsFile, "_raw_rows", raw_rows)
    monkeypatch.setattr(sf.SafetensorsFile, "read_block", read_block)
    assert _run("metrics", folder, "--json").exit_code == 0
    assert read == {
        "model.embed_tokens.weight",
        "base_model.model.model.embed_tokens.token_adapter.trainable_tokens_delta",
    }


def test_report_over_an_adapter(tt_adapter, tmp_path):
    folder, base = tt_adapter
    out = tmp_path / "adapter.html"
    res = _run("report", folder, "--base", base, "-o", out, "--permutations", 10)
    assert res.exit_code == 0, res.output
    data = json.loads(out.with_suffix(".json").read_text())
    rep = data["checkpoints"][0]["report"]
    assert rep["adapter"]["peft_type"] == "LORA" and rep["new_token_source"] == "adapter"
    assert "PEFT adapter tt over" in rep["store"]


def test_untrained_adapter_over_a_mean_resized_base_is_diagnosed_in_peft_terms(tmp_path):
    """Trainable tokens saved before training: the rows are the base's mean-resized ones.
    The verdict names transformers' option (from the numbers) and PEFT's remedy."""
    base = _write_base(tmp_path, tied=True, resized=True)
    model = transformers.AutoModelForCausalLM.from_pretrained(base)
    pm = peft.get_peft_model(model, peft.TrainableTokensConfig(token_indices=NEW))
    folder = tmp_path / "untrained"
    pm.save_pretrained(folder)
    res = _run("check", folder, "--permutations", 10)
    assert res.exit_code == 1
    assert "mean_resizing=True" in res.stdout and "get_peft_model" in res.stdout
    assert "gti init --strategy gti" in res.stdout


def test_modules_to_save_of_other_layers_are_not_token_tables(tmp_path):
    """A norm in modules_to_save (a 1-D weight) is saved like the embedding but is not read."""
    base = _write_base(tmp_path, tied=True, resized=True)
    cfg = peft.LoraConfig(
        r=4, target_modules=["q_proj"], trainable_token_indices=NEW, modules_to_save=["norm"]
    )
    folder, merged = _adapter(tmp_path, base, cfg, "norm")
    ckpt = open_checkpoint(folder)
    assert ckpt.adapter["embedding_changes"] == {"model.embed_tokens.weight": "trainable tokens"}
    np.testing.assert_array_equal(_rows(folder, None, ALL)["input"], _merged(merged, ALL)["input"])


def test_reading_an_adapter_imports_neither_torch_nor_transformers(tt_adapter):
    import subprocess
    import sys

    folder, _ = tt_adapter
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from geodiag.cli import app\n"
        f"res = CliRunner().invoke(app, ['check', {str(folder)!r}, '--permutations', '10'])\n"
        "assert res.exit_code in (0, 1), res.output\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'peft')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_report_pairs_an_adapter_with_its_base_in_either_order(tt_adapter, tmp_path):
    """report BASE ADAPTER: the adapter's config names the base, so the two are a pair (the
    drift of `geodiag drift BASE ADAPTER`), whichever is given first."""
    folder, base = tt_adapter
    want = json.loads(
        _run("drift", base, folder, "--json", "--new-tokens", f"{V0}:{V0 + N_NEW}").output
    )
    for order in ((base, folder), (folder, base)):
        out = tmp_path / "pair.html"
        res = _run("report", *order, "-o", out, "--new-tokens", f"{V0}:{V0 + N_NEW}")
        assert res.exit_code == 0, res.output
        data = json.loads(out.with_suffix(".json").read_text())
        (pair,) = data["pairs"]
        assert pair["why"] == (
            "the base model its adapter_config.json names (a PEFT adapter over its base)"
        )
        (drift,) = data["drift"]
        got = drift["reports"][0]["drift"]
        assert got["relative_change"] == pytest.approx(want[0]["drift"]["relative_change"])
