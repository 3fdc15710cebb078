"""``--vehicle peft``: grounding inside PEFT's trainable tokens gives the native vehicle's
rows, written as an adapter that PEFT loads and geodiag reads over the unchanged base."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest
import torch
import typer
from initworld import build_world
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer
from typer.testing import CliRunner

import geodiag
from gti.checkpoint_files import partial_dir
from gti.errors import Interrupted
from gti.init.cli import init
from gti.init.config import GroundingConfig, InitConfig
from gti.init.run import run_init

EMBED = "base_model.model.model.embed_tokens.trainable_tokens_delta"
HEAD = "base_model.model.lm_head.trainable_tokens_delta"
# The adapter's own files (PEFT writes a model card beside them); no model weights.
ADAPTER_FILES = {"adapter_config.json", "adapter_model.safetensors", "README.md"}
TOKENIZER_FILES = {
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
}
OWN_FILES = {"semantic_ids.json", "codebooks.safetensors", "init_config.json", "train_log.jsonl"}


@pytest.fixture(params=[True, False], ids=["tied", "untied"])
def any_world(request, tmp_path):
    return build_world(tmp_path / "world", tied=request.param)


def ground(world, name: str, vehicle: str, steps: int = 4, **kw) -> Path:
    g = GroundingConfig(steps=steps, batch_size=5, lr=1e-2, progress=False, **kw)
    cfg = InitConfig(
        sids=world.sids_dir,
        out=world.root / name,
        strategy="gti",
        vehicle=vehicle,
        model=str(world.model_dir),
        grounding=g,
    )
    return run_init(cfg)


def new_ids(out: Path) -> list[int]:
    return json.loads((out / "adapter_config.json").read_text())["token_indices"]


def digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.iterdir()):
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


# Exact equality, not a tolerance: PEFT's trainable_tokens_delta holds the rows' values
# (index_copy over the matrix, not an offset added to it), so it starts as the init rows
# and AdamW sees the same parameter as NewRows.inp; PeftRows runs the very same float32
# operations in the same order on it (the frozen layers read under PEFT's wrappers), in
# one process with the same kernels: there is no rounding difference to tolerate.
@pytest.mark.numerics
def test_the_adapter_holds_the_native_rows_and_only_them(any_world):
    base_before = digest(any_world.model_dir)
    native = ground(any_world, "rows", "rows")
    adapter = ground(any_world, "peft", "peft")

    files = {p.name for p in adapter.iterdir()}
    assert OWN_FILES | ADAPTER_FILES <= files
    assert files - ADAPTER_FILES - OWN_FILES <= TOKENIZER_FILES, files  # no model weights
    saved = load_file(adapter / "adapter_model.safetensors")
    assert set(saved) == {EMBED, HEAD}  # PEFT also saves the tied head's copy of the delta
    ids = new_ids(adapter)
    weights = load_file(native / "model.safetensors")
    rows = weights["model.embed_tokens.weight"][ids]
    assert saved[EMBED].equal(rows)
    head = weights.get("lm_head.weight", weights["model.embed_tokens.weight"])
    assert saved[HEAD].equal(head[ids])
    start = load_file(any_world.model_dir / "model.safetensors")["model.embed_tokens.weight"]
    assert not saved[EMBED].equal(start.mean(0).expand_as(saved[EMBED]))  # it trained
    assert digest(any_world.model_dir) == base_before  # the base is not written

    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["peft_type"] == "TRAINABLE_TOKENS"
    assert config["base_model_name_or_path"] == str(any_world.model_dir.resolve())
    assert json.loads((adapter / "init_config.json").read_text())["vehicle"] == "peft"
    assert (
        json.loads((adapter / "semantic_ids.json").read_text())["provenance"]["vehicle"] == "peft"
    )


@pytest.mark.numerics
def test_peft_loads_it_over_the_resized_base_with_the_native_logits(any_world):
    from peft import PeftModel

    native_out = ground(any_world, "rows", "rows")
    adapter = ground(any_world, "peft", "peft")
    tokenizer = AutoTokenizer.from_pretrained(adapter)
    base = AutoModelForCausalLM.from_pretrained(any_world.model_dir)
    n_old = base.get_input_embeddings().weight.shape[0]
    old_rows = base.get_input_embeddings().weight[:n_old].detach().clone()
    base.resize_token_embeddings(len(tokenizer))
    model = PeftModel.from_pretrained(base, adapter).eval()
    native = AutoModelForCausalLM.from_pretrained(native_out).eval()

    ids = new_ids(adapter)
    text = any_world.item_texts["m3"]
    batch = torch.tensor([tokenizer(text)["input_ids"] + ids[:3] + ids[-2:]])  # old and new
    with torch.no_grad():
        got, want = model(batch).logits, native(batch).logits
    # The same rows in the same matrices through the same kernels: the same bits.
    assert got.equal(want)
    merged = model.merge_and_unload().get_input_embeddings().weight
    assert merged[:n_old].equal(old_rows)  # the frozen rows: the base's, untouched
    assert merged[ids].equal(native.get_input_embeddings().weight[ids])


def test_geodiag_gives_the_adapter_the_native_checkpoint_verdict(world):
    native = geodiag.check(str(ground(world, "rows", "rows")))
    adapter = geodiag.check(str(ground(world, "peft", "peft")))
    assert adapter.verdict == native.verdict
    assert [(c.name, c.status) for c in adapter.checks] == [
        (c.name, c.status) for c in native.checks
    ]
    for a, n in zip(adapter.checks, native.checks, strict=True):
        if n.value is None:
            assert a.value is None
            continue
        # The same float32 rows; geodiag reads an adapter's patched matrix in float64
        # (geodiag.io.formats.peft_adapter) and a checkpoint's in float32, so a figure
        # summed over the d = 64 coordinates differs by float32 rounding: relative
        # ~d * 2**-24 = 4e-6 at most.
        assert math.isclose(a.value, n.value, rel_tol=64 * 2**-24, abs_tol=1e-12), n.name


@pytest.mark.numerics
def test_resume_after_a_pause_equals_the_straight_run(world):
    straight = load_file(ground(world, "straight", "peft", steps=6) / "adapter_model.safetensors")
    native = load_file(ground(world, "native", "rows", steps=6) / "model.safetensors")
    assert straight[EMBED].equal(
        native["model.embed_tokens.weight"][new_ids(world.root / "straight")]
    )
    with pytest.raises(Interrupted):
        ground(world, "paused", "peft", steps=6, pause_after=3)
    assert (partial_dir(world.root / "paused") / "state.pt").is_file()
    resumed = load_file(ground(world, "paused", "peft", steps=6) / "adapter_model.safetensors")
    assert not partial_dir(world.root / "paused").exists()
    assert resumed[EMBED].equal(straight[EMBED])


runner = CliRunner()
app = typer.Typer()
app.command("init")(init)
app.command("noop")(lambda: None)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--strategy", "mean"], "trains nothing"),
        (["--pad-vocab-to-multiple-of", "64"], "padding rows"),
        (["--model", "tiny"], "built in memory"),
        (["--vehicle", "lora"], "unknown vehicle"),
        (["--items", "items.jsonl"], "not on the drop-in route"),
    ],
    ids=["no-training", "padding", "no-base-folder", "unknown", "drop-in"],
)
def test_what_the_vehicle_cannot_do_is_bad_input(world, args, says):
    model = [] if "--model" in args else ["--model", str(world.model_dir)]
    vehicle = [] if "--vehicle" in args else ["--vehicle", "peft"]
    out = world.root / "out"
    res = runner.invoke(
        app,
        [
            "init",
            "--sids",
            str(world.sids_dir),
            "-o",
            str(out),
            "--preset",
            "tiny",
            "--no-progress",
            *vehicle,
            *model,
            *args,
        ],
    )
    assert res.exit_code == 2, res.output
    assert "--vehicle" in res.output and says in " ".join(res.output.split())
    assert not out.exists()
