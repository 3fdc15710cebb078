"""A DeepSpeed ``*model_states.pt`` given alone (geodiag.io.formats.unread's
ZERO_MODEL_STATES), on files DeepSpeed 0.16.9 wrote (release_data/): ZeRO-3's holds
placeholders, its weights are partitioned over the ranks; the message names the
partitions, the folder geodiag reads and zero_to_fp32.py, and the folder it names reads."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from geodiag.cli import app
from tests.geodiag.geodiag_fixtures import one_line_exit_2

RELEASE = Path(__file__).resolve().parents[1] / "release_data" / "deepspeed" / "0.16.9"
runner = CliRunner()


def _check(*args) -> object:
    return runner.invoke(app, ["check", *map(str, args)])


@pytest.mark.parametrize(
    ("run", "name"),
    [
        ("zero3", "zero_pp_rank_0_mp_rank_00_model_states.pt"),
        ("zero3", "zero_pp_rank_1_mp_rank_00_model_states.pt"),
        ("zero2", "mp_rank_00_model_states.pt"),
    ],
)
def test_a_model_states_file_names_the_partitions_and_the_folder_to_pass(tmp_path, run, name):
    folder = shutil.copytree(RELEASE / run, tmp_path / run)
    tag = folder / "global_step1"
    line = " ".join(one_line_exit_2(_check(tag / name)).split())
    assert line.startswith(f"error: {tag / name}: a DeepSpeed model-states file, not the weights")
    assert "*_optim_states.pt (zero_pp_rank_*)" in line
    assert f"pass its folder, {tag}/" in line and "zero_to_fp32.py" in line
    assert "not a state dict" not in line
    # The folder it names is read (the verdict, not bad input).
    assert _check(tag, "--base-vocab-size", 32).exit_code in (0, 1)


def test_away_from_its_folder_it_says_which_folder_to_pass(tmp_path):
    alone = shutil.copy(
        RELEASE / "zero3" / "global_step1" / "zero_pp_rank_0_mp_rank_00_model_states.pt",
        tmp_path / "mp_rank_00_model_states.pt",
    )
    line = one_line_exit_2(_check(alone))
    assert "pass the global_stepN/ folder" in line and "zero_to_fp32.py" in line
