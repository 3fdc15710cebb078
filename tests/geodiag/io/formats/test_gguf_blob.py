"""A GGUF file named by its digest (a model store's blob, no ``.gguf``) is recognised by its
magic and gives the verdict of the same file named ``.gguf``; by URL it is named, with the
way out, rather than taken for a folder."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from geodiag.cli import app
from geodiag.io.formats import gguf_blob
from geodiag.io.formats.registry import recognise
from tests.geodiag.geodiag_fixtures import base_rows, planted_new_rows, write_gguf
from tests.geodiag.io.sources.test_remote import _comparable, serve  # noqa: F401

pytest.importorskip("gguf")
runner = CliRunner()


def _blob(tmp_path, kind: str):
    """(the .gguf file, the same bytes as blobs/sha256-<digest>)."""
    base = base_rows()
    named = write_gguf(
        tmp_path / "model.gguf", np.concatenate([base, planted_new_rows(kind, base)])
    )
    digest = hashlib.sha256(named.read_bytes()).hexdigest()
    (tmp_path / "blobs").mkdir()
    return named, shutil.copy(named, tmp_path / "blobs" / f"sha256-{digest}")


@pytest.mark.parametrize("kind", ["grounded", "mean"])
def test_a_digest_named_blob_gets_the_gguf_files_verdict(tmp_path, kind):
    named, blob = _blob(tmp_path, kind)
    assert recognise(blob) == (gguf_blob.FORMAT, blob)  # by its bytes
    assert recognise(named)[0] is not gguf_blob.FORMAT  # by its name: GGUF's own entry
    by_name = runner.invoke(app, ["check", str(named), "--json", "--permutations", "20"])
    by_bytes = runner.invoke(app, ["check", str(blob), "--json", "--permutations", "20"])
    assert by_bytes.exit_code == by_name.exit_code == (0 if kind == "grounded" else 1)
    assert _comparable(json.loads(by_bytes.stdout)) == _comparable(json.loads(by_name.stdout))


def test_without_the_magic_a_blob_is_unknown_and_a_gguf_name_names_the_magic(tmp_path):
    other = tmp_path / ("sha256-" + "0" * 64)
    other.write_bytes(b"GGUX" + bytes(60))
    res = runner.invoke(app, ["check", str(other)])
    assert res.exit_code == 2 and "unknown weights format" in res.output
    named = shutil.copy(other, tmp_path / "model.gguf")  # names second: GGUF's own error
    res = runner.invoke(app, ["check", str(named)])
    assert res.exit_code == 2 and "not a GGUF file (bad magic" in res.output


def test_by_url_the_blob_is_named_with_the_way_out(tmp_path, serve):  # noqa: F811
    _, blob = _blob(tmp_path, "grounded")
    server = serve(tmp_path)
    res = runner.invoke(app, ["check", f"{server.url}/blobs/{blob.name}"])
    assert res.exit_code == 2
    assert gguf_blob.FORMAT.remote in " ".join(res.output.split())
    assert server.requests() == []  # named by the URL alone: nothing fetched
