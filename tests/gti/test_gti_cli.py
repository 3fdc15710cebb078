"""The ``gti`` CLI end to end on offline inputs: ``sids build`` writes exactly its three
files in the sidecar format (both strategies, both encoders), bad input exits 2 with
the file named and nothing written, and ``data fetch`` is a no-op the second time."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pytest
import typer
from safetensors.numpy import load_file
from typer.testing import CliRunner

from geodiag.command_line import leaf_commands, summary
from geodiag.io.vocabulary import sidecar
from gti.cli import FETCHABLE, GTI_INSTALL, app

runner = CliRunner()
FAST = ["--codebook-size", "32", "--epochs", "40", "--no-progress"]


def build(out: Path, *args: str):
    return runner.invoke(
        app, ["sids", "build", "--data", "synthetic", "-o", str(out), *FAST, *args]
    )


@pytest.mark.parametrize("strategy", ["sinkhorn", "dedup-level"])
def test_sids_build_writes_exactly_the_promised_files(tmp_path, tiny_model_dir, strategy):
    out = tmp_path / "runs" / "sids"
    result = build(out, "--model", str(tiny_model_dir), "--encoder", "bow", "--strategy", strategy)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == [
        "codebooks.safetensors",
        "semantic_ids.json",
        "stats.json",
    ]
    assert sorted(p.name for p in out.parent.iterdir()) == ["sids"]  # no staging leftovers

    sids = sidecar.load(out)  # geodiag's own validator
    names = [lv.name for lv in sids.levels]
    assert names == (["a", "b", "c"] if strategy == "sinkhorn" else ["a", "b", "c", "d"])
    assert all(lv.token_ids == [] for lv in sids.levels) and not sids.has_token_ids
    assert len(sids.items) == 192 and len({tuple(v) for v in sids.items.values()}) == 192
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert sids.base_vocab_size == config["vocab_size"]
    assert sids.provenance["stage"] == "sids" and sids.provenance["seed"] == 0
    assert sids.provenance["strategy"] == strategy and sids.provenance["source_model"] == str(
        tiny_model_dir
    )

    books = load_file(out / "codebooks.safetensors")
    assert sorted(books) == ["a", "b", "c"]  # the dedup level has no codebook
    assert all(b.shape == (32, 32) and b.dtype == np.float32 for b in books.values())

    stats = json.loads((out / "stats.json").read_text())
    assert stats["strategy_used"] == strategy  # sinkhorn did not need its fallback
    assert stats["collisions_after"]["collision_rate"] == 0.0
    assert stats["collisions_before"]["collision_rate"] > 0.0  # the strategies had work to do
    assert stats["codebooks_omitted"] == ([] if strategy == "sinkhorn" else ["d"])
    assert [lv["name"] for lv in stats["levels"]] == names
    assert all(
        0 < lv["utilization"] <= 1 and 1 <= lv["perplexity"] <= lv["size"] for lv in stats["levels"]
    )


def test_sids_build_with_the_lm_encoder_reruns_from_cache_and_is_seeded(tmp_path, tiny_model_dir):
    out = tmp_path / "sids"
    first = build(out, "--model", str(tiny_model_dir), "--encoder", "lm")
    assert first.exit_code == 0, first.output
    files = ("semantic_ids.json", "codebooks.safetensors")
    before = [(out / f).read_bytes() for f in files]
    stats = json.loads((out / "stats.json").read_text())
    assert stats["embedding_dim"] == 64 and stats["embeddings_computed"] == 192
    assert stats["rqvae_from_cache"] is False

    # Same inputs: embeddings and the RQ-VAE fit come from the cache; same bytes out.
    again = build(out, "--model", str(tiny_model_dir), "--encoder", "lm")  # replaces its own output
    assert again.exit_code == 0, again.output
    assert [(out / f).read_bytes() for f in files] == before
    stats = json.loads((out / "stats.json").read_text())
    assert stats["embeddings_computed"] == 0 and stats["rqvae_from_cache"] is True

    # An empty cache recomputes everything under the same seed: still the same bytes.
    fresh = tmp_path / "fresh"
    rerun = build(
        fresh,
        "--model",
        str(tiny_model_dir),
        "--encoder",
        "lm",
        "--cache-dir",
        str(tmp_path / "c2"),
    )
    assert rerun.exit_code == 0, rerun.output
    assert [(fresh / f).read_bytes() for f in files] == before


def test_bad_catalog_exits_2_naming_the_file_and_writes_nothing(tmp_path, tiny_model_dir):
    cat = tmp_path / "items.jsonl"
    cat.write_text('{"item_id": "a", "title": "A"}\n{"item_id": "a", "title": "B"}\n')
    inter = tmp_path / "events.csv"
    inter.write_text("user_id,item_id,timestamp\nu,a,1\n")
    out = tmp_path / "out"
    result = runner.invoke(
        app,
        [
            "sids",
            "build",
            "--data",
            f"jsonl:{cat},{inter}",
            "--model",
            str(tiny_model_dir),
            "-o",
            str(out),
        ],
    )
    assert result.exit_code == 2
    assert f"{cat}:2: duplicate item_id 'a'" in result.output
    assert not out.exists()


def test_bad_flag_and_foreign_output_folder_exit_2(tmp_path, tiny_model_dir):
    result = build(tmp_path / "o", "--model", str(tiny_model_dir), "--strategy", "magic")
    assert result.exit_code == 2 and "--strategy: must be one of" in result.output
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("keep me")
    result = build(busy, "--model", str(tiny_model_dir), "--encoder", "bow")
    assert result.exit_code == 2 and "holds other files (notes.txt)" in result.output
    assert (busy / "notes.txt").read_text() == "keep me"


def test_fewer_items_than_codes_shrinks_the_codebook(tmp_path, tiny_model_dir):
    out = tmp_path / "small"
    result = runner.invoke(
        app,
        [
            "sids",
            "build",
            "--data",
            "synthetic",
            "-o",
            str(out),
            "--model",
            str(tiny_model_dir),
            "--encoder",
            "bow",
            "--epochs",
            "5",
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    stats = json.loads((out / "stats.json").read_text())
    assert (stats["codebook_size_requested"], stats["codebook_size"]) == (256, 128)  # 192 items
    assert "192 items < --codebook-size 256: using 128 codes per level" in stats["warnings"][0]
    assert stats["collisions_after"]["collision_rate"] == 0.0


def test_data_fetch_cli_is_idempotent(tmp_path, monkeypatch):
    from test_data_catalogs import fake_recbole_wheel

    calls = []

    def fake_download(requirement: str, dest: Path) -> Path:
        calls.append(requirement)
        return fake_recbole_wheel(dest)

    monkeypatch.setattr("gti.wheels.download_wheel", fake_download)
    monkeypatch.setattr("gti.wheels._installed_members", lambda *a: None)
    for _ in range(2):
        result = runner.invoke(
            app, ["data", "fetch", "movielens-100k", "--cache-dir", str(tmp_path)]
        )
        assert result.exit_code == 0, result.output
    assert calls == ["recbole==1.2.1"]
    assert result.output.strip() == str(tmp_path / "data" / "movielens-100k")
    bad = runner.invoke(app, ["data", "fetch", "netflix"])
    assert bad.exit_code == 2 and "unknown dataset 'netflix'" in bad.output


def test_every_stage_exception_maps_to_its_exit_code():
    """InputError -> 2 and any stage's Interrupted -> 130, one line each on stderr."""
    import typer

    from geodiag.errors import InputError
    from gti.errors import Interrupted, exits_on_bad_input

    raised: list[Exception] = [
        InputError("x.json", "truncated"),
        Interrupted(7, "out.partial"),
        Interrupted(3, "sft.partial"),
    ]
    cli = typer.Typer()

    @cli.command("go")
    @exits_on_bad_input
    def go(which: int) -> None:
        raise raised[which]

    cli.command("noop")(lambda: None)
    res = runner.invoke(cli, ["go", "0"])
    assert res.exit_code == 2 and res.stderr.strip() == "error: x.json: truncated"
    for which, (step, where) in ((1, (7, "out.partial")), (2, (3, "sft.partial"))):
        res = runner.invoke(cli, ["go", str(which)])
        assert res.exit_code == 130, res.output
        assert res.stderr.strip() == (
            f"interrupted: stopped after step {step}; resume state in {where}; "
            "run the same command again to resume"
        )


def test_help_is_import_light():
    """`gti --help` builds every command's options from the configs without torch."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom typer.testing import CliRunner\nfrom gti.cli import app\n"
        "for cmd in (['--help'], ['sft', '--help'], ['init', '--help'], ['evaluate', '--help']):\n"
        "    assert CliRunner().invoke(app, cmd).exit_code == 0, cmd\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_gti_without_torch_prints_the_install_line_and_exits_2(monkeypatch, capsys):
    """The fast, offline twin of tests/geodiag/test_wheel.py's light-install check."""
    import importlib.util

    from gti import cli

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "torch" else real(n, *a)
    )
    monkeypatch.setattr("sys.argv", ["gti", "init", "--sids", "runs/sids"])
    with pytest.raises(SystemExit) as exit_info:
        cli.main()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err == f"error: gti: needs torch and transformers (no module torch): {cli.GTI_INSTALL}\n"


# torch and transformers refused at import, as in an install without them (find_spec, which
# gti.cli's check asks, says None for a module that sys.modules holds as None).
NO_TORCH = (
    "import sys\n"
    "sys.modules['torch'] = sys.modules['transformers'] = None\n"
    "from gti.cli import main\n"
    "sys.argv = ['gti', *sys.argv[1:]]\n"
    "main()\n"
)


def run_without_torch(*args: str):
    import os
    import subprocess
    import sys

    env = {**os.environ, "COLUMNS": "80"}
    cmd = [sys.executable, "-c", NO_TORCH, *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


def test_gti_help_without_torch_lists_the_commands_and_what_to_install():
    out = run_without_torch("--help")
    assert out.returncode == 0 and not out.stderr, out.stderr
    listed = out.stdout.split("Commands:", 1)[1]
    for name in typer.main.get_command(app).commands:
        assert f"\n  {name} " in listed, name
    assert GTI_INSTALL in " ".join(out.stdout.split())


@pytest.mark.parametrize("args", [[], ["init", "--help"], ["data"], ["presets", "ls", "--help"]])
def test_any_help_works_without_torch(args):
    out = run_without_torch(*args)
    # a group named alone: click prints its help on stderr, exit 2 (as geodiag alone)
    shown = out.stdout if "--help" in args else out.stderr
    assert out.returncode == (0 if "--help" in args else 2)
    assert shown.startswith("Usage: gti"), out.stdout + out.stderr
    assert "error" not in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_a_command_without_torch_says_what_to_install():
    out = run_without_torch("init", "--sids", "runs/sids")
    assert out.returncode == 2
    assert (
        out.stderr == f"error: gti: needs torch and transformers (no module torch, "
        f"transformers): {GTI_INSTALL}\n"
    )


GTI = list(leaf_commands(typer.main.get_command(app), "gti"))


@pytest.mark.parametrize("prog,cmd", GTI, ids=[p for p, _ in GTI])
def test_every_command_has_an_example_that_parses(prog, cmd):
    """The example is a real command line: its options exist and take the values given."""
    assert cmd.epilog, f"{prog} has no example"
    words = shlex.split(cmd.epilog.strip())
    n = len(prog.split())
    assert words[:n] == prog.split(), f"{prog}'s example runs {words[:n]}"
    cmd.make_context(prog, words[n:])  # raises click's UsageError on an unknown option


def test_summaries_are_whole_and_data_says_what_it_has():
    res = runner.invoke(app, ["--help"], terminal_width=80)
    listed = " ".join(res.output.split("Commands:", 1)[1].split())
    for name, cmd in typer.main.get_command(app).commands.items():
        said = cmd.short_help or summary(cmd.help)
        assert said.endswith(".") and f"{name} {said}" in listed, name
    assert "..." not in listed
    data = runner.invoke(app, ["data", "--help"], terminal_width=80).output
    commands = data.split("Commands:", 1)[1].split()
    assert commands[0] == "fetch" and "inspect" not in data  # it said "fetch and inspect"
    assert all(name in data for name in FETCHABLE)


def test_one_output_folder_rule(tmp_path):
    """New, empty, or the same stage's previous output (its marker, and for a fixed file
    list nothing else): every stage refuses anything else before it starts."""
    from geodiag.errors import InputError
    from gti.checkpoint_files import check_output_dir

    check_output_dir(tmp_path / "new", "init_config.json")
    (tmp_path / "empty").mkdir()
    check_output_dir(tmp_path / "empty", "init_config.json")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "model.safetensors").write_text("")
    with pytest.raises(InputError, match="holds no init_config.json"):
        check_output_dir(ckpt, "init_config.json")
    (ckpt / "init_config.json").write_text("{}")
    check_output_dir(ckpt, "init_config.json")
    sids = ("semantic_ids.json", "codebooks.safetensors", "stats.json")
    with pytest.raises(
        InputError, match=r"holds other files \(init_config.json, model.safetensors\)"
    ):
        check_output_dir(ckpt, "semantic_ids.json", only=sids)  # a checkpoint is not SIDs
    (ckpt / "x").write_text("")
    with pytest.raises(InputError, match="is not a folder"):
        check_output_dir(ckpt / "x", "init_config.json")


def test_no_deepspeed_warning_opens_a_gti_command_without_a_gpu(monkeypatch):
    """transformers imports DeepSpeed when it is installed; on a CPU-only machine DeepSpeed
    warned it was 'unable to detect' a GPU at the top of `make demo`. The CLI names the CPU
    (DS_ACCELERATOR) unless the user set it; a fresh process then imports it silently."""
    import os
    import subprocess
    import sys

    import torch

    from gti.cli import quiet_deepspeed_on_cpu

    pytest.importorskip("deepspeed")
    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    quiet_deepspeed_on_cpu()
    assert os.environ["DS_ACCELERATOR"] == "cpu"
    monkeypatch.setenv("DS_ACCELERATOR", "cuda")
    quiet_deepspeed_on_cpu()
    assert os.environ["DS_ACCELERATOR"] == "cuda"  # the user's value stands
    code = "from gti.cli import quiet_deepspeed_on_cpu as q; q(); import deepspeed"
    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: DeepSpeed finds it, and no warning is expected either way")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert "unable to detect" not in out.stderr
