"""The callback's parts without a Trainer: what a snapshot logs and alarms on
(geodiag.callback.snapshots), and how a saved checkpoint is described
(geodiag.callback.checkpoints)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("transformers")

from geodiag.callback.checkpoints import describe_checkpoint, reads_memory  # noqa: E402
from geodiag.callback.snapshots import (  # noqa: E402
    FirstRows,
    collapse_of,
    empty_structure,
    logs_of,
    untrained_why,
)
from geodiag.gate.checks import (
    CheckName,  # noqa: E402
    GateConfig,  # noqa: E402
)
from geodiag.io.formats.safetensors import SafetensorsFile, save_file  # noqa: E402
from geodiag.io.vocabulary import sidecar  # noqa: E402

LEVELS = {"a": [10, 11], "b": [12, 13, 14]}


def test_logs_of_names_each_matrix_and_each_level():
    s = {
        **empty_structure(),
        CheckName.SPREAD_RELATIVE: 0.5,
        CheckName.RSA: {"a": 0.25, "b": None},
        "movement": 2,
        "grad_norm": None,
    }
    logs = logs_of({"input": s, "output": {**s, CheckName.SPREAD_RELATIVE: 0.75}}, "g/")
    assert logs == {
        "g/spread_relative": 0.5,
        "g/movement": 2.0,
        "g/rsa_a": 0.25,
        "g/output/spread_relative": 0.75,
        "g/output/movement": 2.0,
        "g/output/rsa_a": 0.25,
    }
    assert all(type(k) is str for k in logs)


def test_collapse_of_says_the_gate_messages_of_the_failed_collapse_checks():
    s = {CheckName.SPREAD_RELATIVE: 1e-5, CheckName.MEAN_PAIRWISE_COSINE: 0.1, "movement": 3.0}
    c = collapse_of(s, GateConfig())
    assert c.collapsed and c.why == ["spread_relative 1e-05 < 0.05"]
    assert not collapse_of({CheckName.SPREAD_RELATIVE: 1.0}, GateConfig()).collapsed


def test_new_token_ids_given_or_from_the_levels(tmp_path):
    from geodiag.io.vocabulary.new_tokens import declare

    assert declare([3, 1], None).ids.tolist() == [3, 1]
    assert declare(None, LEVELS).ids.tolist() == [10, 11, 12, 13, 14]
    levels = [sidecar.Level(k, len(v), v) for k, v in LEVELS.items()]
    sidecar.save(sidecar.SemanticIds(10, levels, {}), tmp_path / sidecar.FILENAME)
    assert declare(None, tmp_path).ids.tolist() == [10, 11, 12, 13, 14]


def test_untrained_why_names_both_kinds_and_the_rule():
    fixed = FirstRows(np.zeros((1, 1)), 1.0, 0.001, "the rule")
    s = {"n_unmoved": 2, "identical_rows": 3}
    assert untrained_why(s, fixed) == (
        "2 not moved since the first snapshot; 3 in a group of identical rows; "
        "tolerance 0.001 = the rule"
    )


def test_describe_writes_the_sidecar_and_the_codebooks_once(tmp_path):
    torch = pytest.importorskip("torch")
    folder = tmp_path / "checkpoint-7"
    folder.mkdir()
    books = {"a": torch.ones(2, 3), "b": torch.zeros(3, 3, dtype=torch.float64)}
    describe_checkpoint(folder, 7, LEVELS, books, None)
    side = sidecar.load(folder)
    assert side.base_vocab_size == 10 and side.provenance == {
        "step": 7,
        "written_by": "geodiag.callback.GeodiagCallback",
    }
    f = SafetensorsFile(folder / sidecar.CODEBOOKS_FILENAME)
    assert {k: t.dtype for k, t in f.tensors.items()} == {"a": "F32", "b": "F32"}
    before = (folder / sidecar.FILENAME).read_text()
    describe_checkpoint(folder, 9, LEVELS, books, 5)  # a described folder is left alone
    assert (folder / sidecar.FILENAME).read_text() == before
    describe_checkpoint(tmp_path, 1, None, books, None)  # no levels: nothing to say
    assert not (tmp_path / sidecar.FILENAME).exists()


def test_describe_takes_the_codebooks_beside_a_sidecar(tmp_path):
    src = tmp_path / "sids"
    src.mkdir()
    levels = [sidecar.Level(k, len(v), v) for k, v in LEVELS.items()]
    sidecar.save(sidecar.SemanticIds(10, levels, {"i": [1, 2]}), src / sidecar.FILENAME)
    save_file({"a": np.ones((2, 3), np.float32)}, src / sidecar.CODEBOOKS_FILENAME)
    folder = tmp_path / "checkpoint-1"
    folder.mkdir()
    describe_checkpoint(folder, 1, src, None, None)
    assert sidecar.load(folder).items == {"i": [1, 2]}
    assert (folder / sidecar.CODEBOOKS_FILENAME).read_bytes() == (
        src / sidecar.CODEBOOKS_FILENAME
    ).read_bytes()


def test_an_adapter_folder_or_none_is_read_from_memory(tmp_path):
    assert reads_memory(tmp_path / "missing")
    assert not reads_memory(tmp_path)
    (tmp_path / "adapter_config.json").write_text("{}")
    assert reads_memory(tmp_path)
