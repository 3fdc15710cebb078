"""Describing a checkpoint folder (geodiag.io.sidecar.write_description), the writer gti's
checkpoints and the Trainer callback share; the ``levels`` argument (geodiag.io.levels)."""

from __future__ import annotations

import numpy as np
import pytest

from geodiag.errors import InputError
from geodiag.io import sidecar
from geodiag.io.levels import read_levels, token_ids
from geodiag.io.safetensors import SafetensorsFile, save_file


def sids() -> sidecar.SemanticIds:
    levels = [sidecar.Level("a", 2, [10, 11]), sidecar.Level("b", 3, [12, 13, 14])]
    return sidecar.SemanticIds(10, levels, {"item": [1, 2]}, {"step": 3})


def test_a_codebooks_file_is_copied_byte_for_byte_and_the_sidecar_written(tmp_path):
    books = {"a": np.ones((2, 4), np.float32), "b": np.zeros((3, 4), np.float32)}
    src = save_file(books, tmp_path / "books.safetensors")
    folder = tmp_path / "ckpt"
    folder.mkdir()
    sidecar.write_description(folder, sids(), src)
    assert (folder / sidecar.CODEBOOKS_FILENAME).read_bytes() == src.read_bytes()
    assert sidecar.load(folder) == sids()


def test_arrays_are_written_as_float32_and_a_file_already_there_is_kept(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    sidecar.write_description(folder, sids(), {"a": np.arange(8.0).reshape(2, 4)})
    f = SafetensorsFile(folder / sidecar.CODEBOOKS_FILENAME)
    assert f.tensors["a"].dtype == "F32" and f.read("a").tolist()[1] == [4, 5, 6, 7]
    before = (folder / sidecar.CODEBOOKS_FILENAME).read_bytes()
    sidecar.write_description(folder, sids(), {"a": np.zeros((2, 4))})
    assert (folder / sidecar.CODEBOOKS_FILENAME).read_bytes() == before
    sidecar.write_description(folder, sids(), None)  # no codebooks: the sidecar alone
    assert sidecar.load(folder).levels[1].token_ids == [12, 13, 14]


def test_levels_from_a_mapping_a_sidecar_object_and_a_file(tmp_path):
    by_level, path = read_levels({"a": [10, 11], "b": np.array([12, 13, 14])})
    assert path is None and {k: v.tolist() for k, v in by_level.items()} == {
        "a": [10, 11],
        "b": [12, 13, 14],
    }
    assert read_levels(sids())[0]["b"].tolist() == [12, 13, 14]
    sidecar.save(sids(), tmp_path / sidecar.FILENAME)
    by_level, path = read_levels(tmp_path)
    assert path == tmp_path / sidecar.FILENAME and by_level["a"].tolist() == [10, 11]
    with pytest.raises(InputError, match="token ids repeat"):
        token_ids([1, 1], "new_ids")
    with pytest.raises(InputError, match="levels"):
        read_levels({})
