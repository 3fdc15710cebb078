"""gti.presets: the shipped TOMLs, the one precedence rule, `gti presets ls` / `cp`."""

from __future__ import annotations

import tomllib

import pytest
from typer.testing import CliRunner

from geodiag.errors import InputError
from gti.cli import app
from gti.experiment.config import load_config, read_config
from gti.presets import merge, preset_names, preset_text, read_preset, resolve

runner = CliRunner()


def test_presets_are_whole_configs_of_an_entry_point():
    assert {"tiny", "demo", "cpu", "paper", "study"} <= set(preset_names())
    for name in preset_names():
        table = read_preset(name)
        assert "preset" not in table and "grounding" in table and "sft" in table, name


def test_top_level_preset_then_file_then_flag(tmp_path):
    """dataclass defaults < preset < TOML < flags, key by key and table by table."""
    path = tmp_path / "x.toml"
    path.write_text('preset = "cpu"\nseeds = [1, 2]\n[sft]\nsteps = 7\n[sids.rqvae]\nepochs = 3\n')
    cfg = load_config(path, out=tmp_path / "flag")
    cpu = read_preset("cpu")
    assert cfg.seeds == (1, 2) and cfg.sft.steps == 7  # the file over the preset
    assert cfg.sft.batch_size == cpu["sft"]["batch_size"]  # the preset's, kept in its table
    assert cfg.sids.rqvae.epochs == 3 and cfg.sids.rqvae.codebook_size == 256
    assert cfg.sft.min_lr_ratio == 0.1  # nobody sets it: the dataclass default
    assert cfg.out == tmp_path / "flag" and cfg.name == "cpu"  # the flag over the file


def test_section_preset_takes_that_section_alone(tmp_path):
    """A section naming a preset is that preset's section plus its own keys, whatever the
    top-level preset's section holds (demo grounds with warm-up and cosine; cpu does not)."""
    path = tmp_path / "x.toml"
    path.write_text('preset = "demo"\n[grounding]\npreset = "cpu"\nlr = 1e-2\n')
    g = load_config(path).grounding
    assert (g.steps, g.batch_size, g.lr, g.warmup_steps, g.decay) == (74, 32, 1e-2, 0, "none")
    assert read_preset("study")["grounding"]["steps"] == read_preset("cpu")["grounding"]["steps"]


def test_a_name_instead_of_a_file_reads_the_preset(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert read_config("demo") == read_preset("demo")
    assert load_config("tiny").name == "tiny"


def test_merge_replaces_lists_and_values():
    assert merge({"a": [1, 2], "t": {"x": 1, "y": 2}}, {"a": [3], "t": {"y": 5}}) == {
        "a": [3],
        "t": {"x": 1, "y": 5},
    }


def test_unknown_and_circular_presets_are_bad_input(monkeypatch):
    with pytest.raises(InputError, match="'huge' is not a preset"):
        resolve({"preset": "huge"}, "f.toml")
    with pytest.raises(InputError, match=r"\[sft\] preset = 3 is not a preset"):
        resolve({"sft": {"preset": 3}}, "f.toml")
    texts = {"a": 'preset = "b"\n', "b": 'preset = "a"\n'}
    monkeypatch.setattr("gti.presets.preset_names", lambda: ("a", "b"))
    monkeypatch.setattr("gti.presets.preset_text", lambda name, flag="": texts[name])
    with pytest.raises(InputError, match="names it back"):
        read_preset("a")


def test_presets_ls_and_cp(tmp_path):
    res = runner.invoke(app, ["presets", "ls"])
    assert res.exit_code == 0, res.output
    rows, said, name = {}, {}, ""
    for line in res.output.splitlines():
        if line.startswith("    "):  # what the preset above is for, wrapped
            said[name] = f"{said.get(name, '')} {line.strip()}".strip()
        else:
            name = line.split()[0]
            rows[name] = line
    assert set(rows) == set(preset_names()) == set(said)
    assert "gti study run" in rows["study"] and "grounding 74 x 32" in rows["cpu"]
    # whole sentences, not the first line of the comment
    assert (
        said["cpu"].endswith("give each stage).")
        and "94 min measured on an idle 2-core" in (said["cpu"])
    )
    assert said["paper"] == (
        "The paper's setting (arXiv 2604.02324) on a GPU: Qwen3-0.6B, grounding 8,000 steps "
        "x batch 128 at lr 1e-3, then SFT of all parameters for the same 8,000 x 128, every "
        "arm, three seeds."
    )

    res = runner.invoke(app, ["presets", "cp", "demo", str(tmp_path)])
    assert res.exit_code == 0, res.output
    copied = tmp_path / "demo.toml"
    assert res.output.strip() == str(copied) and copied.read_text() == preset_text("demo")
    assert tomllib.loads(copied.read_text())["name"] == "demo"
    res = runner.invoke(app, ["presets", "cp", "demo", str(copied)])  # never replaced
    assert res.exit_code == 2 and "exists" in res.output
    res = runner.invoke(app, ["presets", "cp", "huge", str(tmp_path / "h.toml")])
    assert res.exit_code == 2 and "unknown preset 'huge'" in res.output
