"""Ollama's model store (geodiag.io.formats.ollama): a manifest, or a store folder holding
one model, is read as the GGUF blob its model layer names, with the verdict and figures of
that GGUF file named ``.gguf``; what cannot be read exits 2 naming what to pass."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from geodiag.cli import app
from geodiag.io.formats import ollama
from geodiag.io.formats.registry import recognise
from tests.geodiag.geodiag_fixtures import base_rows, one_line_exit_2, planted_new_rows, write_gguf
from tests.geodiag.io.sources.test_remote import _comparable

pytest.importorskip("gguf")
runner = CliRunner()
CHECK = ["--json", "--permutations", "20"]


def write_ollama(models, gguf_file, name="tiny", tag="latest"):
    """``ollama pull``'s layout under ``models/``: the GGUF as ``blobs/sha256-<hex>``, a
    params layer beside it, and the manifest naming both; returns the manifest."""
    data = gguf_file.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    params = b'{"stop": ["<|endoftext|>"]}'
    (models / "blobs").mkdir(parents=True, exist_ok=True)
    (models / "blobs" / f"sha256-{digest}").write_bytes(data)
    (models / "blobs" / f"sha256-{hashlib.sha256(params).hexdigest()}").write_bytes(params)
    manifest = models / "manifests" / "registry.ollama.ai" / "library" / name / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    layer = {"mediaType": ollama.MODEL_LAYER, "digest": f"sha256:{digest}", "size": len(data)}
    params_layer = {
        "mediaType": "application/vnd.ollama.image.params",
        "digest": f"sha256:{hashlib.sha256(params).hexdigest()}",
        "size": len(params),
    }
    manifest.write_text(
        json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "config": {"mediaType": "application/vnd.docker.container.image.v1+json"},
                "layers": [layer, params_layer],
            }
        )
    )
    return manifest


def _gguf(tmp_path, kind: str):
    base = base_rows()
    emb = np.concatenate([base, planted_new_rows(kind, base)])
    return write_gguf(tmp_path / f"{kind}.gguf", emb)


def _check(path):
    return runner.invoke(app, ["check", str(path), *CHECK])


@pytest.mark.parametrize("kind", ["grounded", "mean"])
def test_a_manifest_and_its_store_get_the_gguf_files_verdict_and_figures(tmp_path, kind):
    named = _gguf(tmp_path, kind)
    models = tmp_path / "models"
    manifest = write_ollama(models, named)
    assert recognise(manifest) == (ollama.FORMAT, manifest)
    assert recognise(models) == (ollama.FORMAT, models)
    want = _check(named)
    assert want.exit_code == (0 if kind == "grounded" else 1)
    for path in (manifest, models):
        got = _check(path)
        assert got.exit_code == want.exit_code, got.output
        assert _comparable(json.loads(got.stdout)) == _comparable(json.loads(want.stdout))


def test_a_store_of_several_models_names_them_and_what_to_pass(tmp_path):
    models = tmp_path / "models"
    write_ollama(models, _gguf(tmp_path, "grounded"), tag="latest")
    manifest = write_ollama(models, _gguf(tmp_path, "mean"), name="other", tag="q4")
    line = one_line_exit_2(runner.invoke(app, ["check", str(models)]))
    assert "an Ollama model store with 2 models" in line
    assert "registry.ollama.ai/library/other/q4" in line and "pass the manifest" in line
    assert _check(manifest).exit_code == 1  # the mean rows, read through their manifest


def test_a_missing_blob_or_no_model_layer_is_named(tmp_path):
    models = tmp_path / "models"
    manifest = write_ollama(models, _gguf(tmp_path, "grounded"))
    for blob in (models / "blobs").glob("sha256-*"):
        if blob.stat().st_size > 100:
            blob.unlink()
    line = one_line_exit_2(runner.invoke(app, ["check", str(manifest)]))
    assert "which is not in" in line and "`ollama pull tiny:latest`" in line
    data = json.loads(manifest.read_text())
    data["layers"] = data["layers"][1:]
    manifest.write_text(json.dumps(data))
    line = one_line_exit_2(runner.invoke(app, ["check", str(manifest)]))
    assert "an Ollama manifest with 0 model layers" in line
