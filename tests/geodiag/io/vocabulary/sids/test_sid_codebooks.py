"""Codebooks in safetensors files: RQ-VAE-Recommender's ``PyTorchModelHubMixin``
``model.safetensors`` read by its level tensors; a file that yields no codebook is exit 2
naming what was looked for and what it holds (it gave PASS with RSA skipped); our own
``codebooks.safetensors`` read over a vocabulary holding only the codes items use, its
codes without a token counted as dead codes (it was refused: "codebook 'c' has 16 codes,
but level 'c' has 13"). The reference figures are the sidecar route's on the same SIDs."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import sid_frameworks as fx
import sid_frameworks_variants as fv
from geodiag_fixtures import one_line_exit_2
from test_sid_routes import figures
from typer.testing import CliRunner

from geodiag.cli import app
from geodiag.io.formats.safetensors import save_file
from geodiag.io.vocabulary import sidecar

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def metrics(folder, *flags) -> dict:
    res = run("metrics", folder, "--json", *flags)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("books")
    fx.write_sidecar(out / "sidecar")
    return out, figures(metrics(out / "sidecar")), fx.write_lcrec(out / "lcrec")


def test_rqvae_recommenders_hub_safetensors_gives_the_sidecar_figures(written, tmp_path):
    pytest.importorskip("safetensors.torch")
    _, want, lcrec = written
    hub = fv.write_rqvae_recommender_hub(tmp_path / "rqvae-hub")
    model = fx.write_model(tmp_path / "model", "letter")
    report = metrics(model, "--sids", lcrec["sids"], "--codebooks", hub)
    got = figures(report)
    assert got["rsa"] == pytest.approx(want["rsa"], abs=1e-9)
    assert got["dead"] == want["dead"]
    assert any("RQ-VAE-Recommender's layers.0.embedding.weight" in n for n in report["notes"])


def test_a_codebook_file_that_yields_nothing_is_exit_2_naming_what_it_holds(written, tmp_path):
    out, _, lcrec = written
    model = fx.write_model(tmp_path / "model", "letter")
    weights = model / "model.safetensors"  # a safetensors file, but no codebook in it
    for flags in (["--sids", lcrec["sids"]], []):
        line = one_line_exit_2(run("check", model, *flags, "--codebooks", weights))
        assert str(weights) in line and "no codebook for any level" in line
        assert "named a, b, c" in line and "RQ-VAE-Recommender: ^layers" in line
        assert f"it holds 1 tensors: model.embed_tokens.weight [{fx.BASE + 3 * fx.K}, " in line
    # our own route, the sidecar's levels a, b, c: the same refusal
    line = one_line_exit_2(run("check", out / "sidecar", "--codebooks", weights))
    assert "no codebook for any level" in line


def test_ours_over_a_vocabulary_of_used_codes_counts_the_dead_codes(written, tmp_path):
    _, want, lcrec = written
    model = fv.write_model_used_codes(tmp_path / "used")
    books = tmp_path / sidecar.CODEBOOKS_FILENAME
    save_file({sidecar.level_name(i): b for i, b in enumerate(fx.code_books())}, books)
    got = figures(metrics(model, "--sids", lcrec["sids"], "--codebooks", books))
    assert got["dead"] == want["dead"] == [[], [], list(range(fx.K - fx.DEAD_C, fx.K))]
    # RSA over the 13 rows level c has: as the .npz reader (which took such books) gives it
    npz = tmp_path / "Games.codebooks.npz"
    np.savez_compressed(npz, **{f"codebook_{i}": b for i, b in enumerate(fx.code_books())})
    by_npz = figures(metrics(model, "--sids", lcrec["sids"], "--codebooks", npz))
    assert got == by_npz
    # beside the weights, found without the flag: the same
    shutil.copy(books, model / sidecar.CODEBOOKS_FILENAME)
    assert figures(metrics(model, "--sids", lcrec["sids"]))["dead"] == want["dead"]


def test_one_rule_a_known_level_size_needs_that_many_codes(written, tmp_path):
    """Our sidecar states 16 codes per level: a codebook of 17 is refused, as before; the
    framework route takes the codebook's size, so the same 17 rows make 17 codes."""
    out, _, lcrec = written
    folder = shutil.copytree(out / "sidecar", tmp_path / "sidecar")
    books = {sidecar.level_name(i): b for i, b in enumerate(fx.code_books())}
    books["b"] = np.concatenate([books["b"], books["b"][:1] + 1.0])
    save_file(books, folder / sidecar.CODEBOOKS_FILENAME)
    line = one_line_exit_2(run("check", folder))
    assert "codebook 'b' has 17 codes, but level 'b' has 16" in line
    report = metrics(
        fx.write_model(tmp_path / "m", "letter"),
        "--sids",
        lcrec["sids"],
        "--codebooks",
        folder / sidecar.CODEBOOKS_FILENAME,
    )
    assert [lv["n_codes"] for lv in report["codebook"]["levels"]] == [fx.K, fx.K + 1, fx.K]
