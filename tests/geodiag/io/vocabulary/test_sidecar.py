"""Describing a checkpoint folder (geodiag.io.vocabulary.sidecar.write_description), the writer gti's
checkpoints and the Trainer callback share; the ``levels`` argument (geodiag.io.vocabulary.new_tokens.declare)."""

from __future__ import annotations

import numpy as np
import pytest

from geodiag.errors import InputError
from geodiag.io.formats.safetensors import SafetensorsFile, save_file
from geodiag.io.vocabulary import sidecar
from geodiag.io.vocabulary.new_tokens import declare


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
    d = declare(None, {"a": [10, 11], "b": np.array([12, 13, 14])})
    assert d.levels_path is None and {k: v.tolist() for k, v in d.by_level.items()} == {
        "a": [10, 11],
        "b": [12, 13, 14],
    }
    assert d.ids.tolist() == [10, 11, 12, 13, 14] and d.base == 10  # the smallest new id
    assert declare(None, sids()).by_level["b"].tolist() == [12, 13, 14]
    sidecar.save(sids(), tmp_path / sidecar.FILENAME)
    d = declare(None, tmp_path)
    assert d.levels_path == tmp_path / sidecar.FILENAME and d.by_level["a"].tolist() == [10, 11]
    assert d.base == 10  # the file's own base_vocab_size
    with pytest.raises(InputError, match="token ids repeat"):
        declare([1, 1])
    with pytest.raises(InputError, match="levels"):
        declare(None, {})
