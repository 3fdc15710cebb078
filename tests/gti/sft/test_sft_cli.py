"""``gti sft`` end to end on the tiny world: the exact files, the provenance, errors."""

from __future__ import annotations

import json

import pytest
import typer
from transformers import AutoModelForCausalLM
from typer.testing import CliRunner

from geodiag.io.checkpoint import open_checkpoint
from geodiag.io.vocabulary import sidecar
from gti.sft.cli import sft

runner = CliRunner()
app = typer.Typer()
app.command("sft")(sft)
app.command("noop")(lambda: None)  # two commands: `sft` is a subcommand, as in gti

# save_pretrained of a tiny Llama + a fast tokenizer, then our own files.
HF_FILES = {
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
}
OWN_FILES = {"semantic_ids.json", "codebooks.safetensors", "sft_config.json", "train_log.jsonl"}
FLAGS = [
    "--steps",
    "3",
    "--batch-size",
    "4",
    "--micro-batch-size",
    "2",
    "--k-core",
    "1",
    "--max-history",
    "3",
    "--warmup-steps",
    "1",
    "--no-progress",
    "--device",
    "cpu",
]


def test_writes_a_contract_checkpoint_with_stage_sft(world, tmp_path):
    out = tmp_path / "runs" / "sft"
    res = runner.invoke(app, ["sft", "--init", str(world.init), "-o", str(out), *FLAGS])
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() == str(out)
    assert {p.name for p in out.iterdir()} == HF_FILES | OWN_FILES
    assert sorted(p.name for p in out.parent.iterdir()) == ["sft"]  # no staging, no .partial

    init, sids = sidecar.load(world.init), sidecar.load(out)
    assert sids.levels == init.levels and sids.items == init.items
    assert sids.base_vocab_size == init.base_vocab_size
    prov = sids.provenance
    assert prov["stage"] == "sft" and prov["step"] == 3 and prov["seed"] == 0
    assert prov["init_strategy"] == "random" and prov["sft_tasks"] == "next-item"
    assert prov["init"] == init.provenance and prov["data"] == world.data_spec
    # The init is named relative to the checkpoint: geodiag's reference for the movement.
    assert sidecar.init_checkpoint(sids, out).resolve() == world.init.resolve()
    ckpt = open_checkpoint(out)
    assert ckpt.reference is not None and ckpt.reference.path.resolve() == world.init.resolve()
    assert "the init checkpoint semantic_ids.json names" in ckpt.reference_notes[-1]
    assert (out / "codebooks.safetensors").read_bytes() == world.codebooks.read_bytes()

    config = json.loads((out / "sft_config.json").read_text())
    assert config["steps"] == 3 and config["processes"] == 1 and config["init"] == str(world.init)
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in log] == [1, 2, 3]

    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.get_input_embeddings().weight.data_ptr() == model.lm_head.weight.data_ptr()


def test_bad_input_exits_2_and_writes_nothing(world, tmp_path):
    out = tmp_path / "sft"
    cases = [
        (["--freeze", "everything"], "--freeze"),
        (["--batch-size", "5"], "--batch-size"),
        (["--tasks", "chat"], "--tasks"),
        (["--k-core", "50"], "--k-core"),
    ]
    for extra, flag in cases:
        res = runner.invoke(app, ["sft", "--init", str(world.init), "-o", str(out), *FLAGS, *extra])
        assert res.exit_code == 2, (extra, res.output)
        assert flag in res.output
    res = runner.invoke(app, ["sft", "--init", str(tmp_path), "-o", str(out), *FLAGS])
    assert res.exit_code == 2 and "semantic_ids.json" in res.output
    assert not out.exists() and not (tmp_path / "sft.partial").exists()


def test_a_new_sft_setting_is_one_field():
    """One field with help and bounds is an option, a checked bound, a TOML key, part of
    the resume fingerprint and of sft_config.json, with no other edit."""
    from dataclasses import dataclass

    from geodiag.errors import InputError
    from geodiag.settings import cli_parameters, from_table, setting
    from gti.options import fingerprinted, recorded
    from gti.sft.config import SFTConfig

    @dataclass
    class Extended(SFTConfig):
        label_smoothing: float = setting(0.0, help="Label smoothing.", ge=0, le=1)

    assert "label_smoothing" in [p.name for p in cli_parameters(Extended)]
    with pytest.raises(InputError, match=r"--label-smoothing: must be in \[0, 1\], got 2"):
        Extended(label_smoothing=2).validate()
    assert from_table(Extended, {"label_smoothing": 0.1}, "x.toml", "sft").label_smoothing == 0.1
    assert "label_smoothing" in fingerprinted(Extended)
    assert recorded(Extended())["label_smoothing"] == 0.0


def test_sequence_objective_writes_the_same_checkpoint_files(world, tmp_path):
    """--objective sequence runs the same loop: packed windows instead of prompts."""
    from transformers import AutoTokenizer

    from gti.sft.config import SFTConfig
    from gti.sft.run import cpu_has_bf16

    tok = AutoTokenizer.from_pretrained(world.init)
    parts = [(SFTConfig.sequence_prefix, True), (SFTConfig.separator, False)]

    out = tmp_path / "sft"
    seq = ["--objective", "sequence", "--window", "4", "--stride", "3"]
    res = runner.invoke(app, ["sft", "--init", str(world.init), "-o", str(out), *FLAGS, *seq])
    assert res.exit_code == 0, res.output
    assert {p.name for p in out.iterdir()} == HF_FILES | OWN_FILES
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sft"]  # no .partial left
    config = json.loads((out / "sft_config.json").read_text())
    assert config["objective"] == "sequence" and (config["window"], config["stride"]) == (4, 3)
    assert config["examples_per_epoch"] == 10  # 5 users x 2 windows
    # prefix + 4 or 2 items of 3 SID tokens, the separator between them, per user
    prefix, sep = (len(tok(t, add_special_tokens=a)["input_ids"]) for t, a in parts)
    assert config["tokens_per_epoch"] == 5 * (2 * prefix + 6 * 3 + 4 * sep)
    # --bf16 auto on a float32 run: autocast exactly where the CPU computes bf16 natively.
    assert config["cpu_bf16_autocast"] is cpu_has_bf16()
    assert config["mixed_precision"] == "no"  # accelerate's is CUDA's
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in log] == [1, 2, 3]
    assert all(e["loss"] > 0 for e in log)
    assert sidecar.load(out).provenance["stage"] == "sft"


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (["--objective", "packed"], "--objective"),
        (["--objective", "sequence", "--tasks", "lcrec"], "--objective"),
        (["--objective", "sequence", "--window", "4", "--stride", "4"], "--stride"),
        (["--window", "1"], "--window"),
        (["--bf16", "yes"], "--bf16"),
    ],
)
def test_bad_sequence_options_exit_2_naming_the_flag(world, tmp_path, extra, flag):
    out = tmp_path / "sft"
    res = runner.invoke(app, ["sft", "--init", str(world.init), "-o", str(out), *FLAGS, *extra])
    assert res.exit_code == 2, res.output
    assert flag in res.output
    assert not out.exists()
