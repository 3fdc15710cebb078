"""``geodiag drift CHECKPOINT GGUF``: a GGUF converted from the checkpoint is read with the
checkpoint's sidecar (levels and codes), whether it is named ``.gguf`` or is a model
store's blob named by its digest, recognised by its bytes."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pytest
from geodiag_fixtures import BASE_VOCAB, base_rows, planted_new_rows, write_gguf
from typer.testing import CliRunner

from geodiag.cli import app

pytest.importorskip("gguf")


def _drift(before, after) -> dict:
    res = CliRunner().invoke(
        app, ["drift", str(before), str(after), "--permutations", "20", "--json"]
    )
    assert res.exit_code == 0, res.output
    (report,) = json.loads(res.stdout)
    return report


def test_a_digest_named_gguf_blob_is_paired_with_the_checkpoints_sidecar(make_ckpt, tmp_path):
    base, new = base_rows(), planted_new_rows("grounded", base_rows())
    ck = make_ckpt(new, name="ckpt")
    # every token typed NORMAL but the control token: the GGUF alone names no row as new
    types = [3] + [1] * (BASE_VOCAB - 1 + len(new))
    named = write_gguf(
        tmp_path / "model.gguf", np.concatenate([base, new]), qtype="Q8_0", types=types
    )
    digest = hashlib.sha256(named.read_bytes()).hexdigest()
    (tmp_path / "blobs").mkdir()
    blob = shutil.copy(named, tmp_path / "blobs" / f"sha256-{digest}")
    by_name, by_bytes = _drift(ck, named), _drift(ck, blob)
    assert by_name["n_tokens"] == len(new)
    # the checkpoint's sidecar names the new rows and their levels a, b, c: the blob's too
    assert set(by_bytes["quantization"]["rsa_before"]) == {"a", "b", "c"}
    assert set(by_bytes["levels"]) == set(by_name["levels"]) == {"a", "b", "c"}
    for key in ("n_tokens", "drift", "levels", "quantization"):
        assert by_bytes[key] == by_name[key], key
