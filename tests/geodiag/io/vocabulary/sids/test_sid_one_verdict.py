"""One checkpoint, one verdict on the frameworks' files and the hostile set: ``geodiag
check PATH`` (CLI, --json), ``geodiag.check`` on the path, and on the rows in memory with the
folder's files (``folder=``), each with the framework's map as ``--sids`` / ``sids=``, give
the same pass / fail, checks, statuses and values; and the map's dead codes count the same.
The six test-sized demo arms are held to it in tests/gti/sft/test_one_verdict.py."""

from __future__ import annotations

import json

import pytest
import sid_frameworks as fx
from geodiag_fixtures import (
    base_rows,
    planted_new_rows,
    write_checkpoint,
    write_hostile_sidecar_checkpoint,
    write_hostile_tokenizer_checkpoint,
)
from safetensors.numpy import load_file
from typer.testing import CliRunner

import geodiag
from geodiag.cli import app

PERMUTATIONS = 20


def _judged(result) -> tuple:
    return result.passed, [
        (c.matrix, c.name, c.status, None if c.value is None else round(c.value, 12))
        for c in result.checks
    ]


def _cli(path, *flags) -> tuple:
    args = ["check", str(path), "--json", "--permutations", str(PERMUTATIONS), *map(str, flags)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code in (0, 1), res.output
    data = json.loads(res.stdout)
    (entry,) = data["results"]
    checks = [
        (c["matrix"], c["name"], c["status"], None if c["value"] is None else round(c["value"], 12))
        for c in entry["checks"]
    ]
    assert (res.exit_code == 0) == data["passed"]
    return data["passed"], checks


def _rows(folder):
    return load_file(folder / "model.safetensors")["model.embed_tokens.weight"]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("frameworks")
    return out, fx.write_all(out)


@pytest.mark.parametrize("framework", list(fx.FRAMEWORKS))
def test_a_framework_map_gives_one_verdict_on_every_route(written, framework):
    _, files = written
    f = files[framework]
    model, sids, books = f["model"], f["sids"], f["codebooks"]
    kw = dict(sids=sids, codebooks=books, n_permutations=PERMUTATIONS)
    by_path = _judged(geodiag.check(model, **kw))
    assert _cli(model, "--sids", sids, "--codebooks", books) == by_path
    assert _judged(geodiag.check(_rows(model), folder=model, **kw)) == by_path
    # the dead codes of level c are spared, or counted, the same on both
    u_path = geodiag.measure(model, sids=sids, codebooks=books, neighbors=0).matrices[0]
    u_mem = geodiag.measure(_rows(model), folder=model, sids=sids, codebooks=books, neighbors=0)
    assert u_mem.matrices[0].untrained.n_untrained == u_path.untrained.n_untrained


def test_our_sidecar_gives_one_verdict_on_every_route(written):
    out, _ = written
    folder = out / "sidecar"
    by_path = _judged(geodiag.check(folder, n_permutations=PERMUTATIONS))
    assert _cli(folder) == by_path
    assert (
        _judged(geodiag.check(_rows(folder), folder=folder, n_permutations=PERMUTATIONS)) == by_path
    )
    levels = geodiag.check(
        _rows(folder), levels=folder / "semantic_ids.json", n_permutations=PERMUTATIONS
    )
    assert _judged(levels) == by_path  # the sidecar given as levels= is the sidecar


HOSTILE = {
    "tokenizer/mean": lambda root: write_hostile_tokenizer_checkpoint(root, "mean"),
    "tokenizer/random": lambda root: write_hostile_tokenizer_checkpoint(root, "random"),
    "sidecar/mean": lambda root: write_hostile_sidecar_checkpoint(root, "mean"),
    "sidecar/grounded": lambda root: write_hostile_sidecar_checkpoint(root, "grounded"),
    "plain/mean": lambda root: write_checkpoint(root, planted_new_rows("mean", base_rows())),
}


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_the_hostile_set_gives_one_verdict_on_every_route(tmp_path, kind):
    folder = HOSTILE[kind](tmp_path / "ckpt")
    by_path = _judged(geodiag.check(folder, n_permutations=PERMUTATIONS))
    assert _cli(folder) == by_path
    assert (
        _judged(geodiag.check(_rows(folder), folder=folder, n_permutations=PERMUTATIONS)) == by_path
    )


def test_a_vocabulary_of_the_used_codes_only_reads_in_memory_as_on_disk(written, tmp_path):
    """Frameworks add tokens only for the codes their items use: in memory with sids= the map
    is read as --sids reads it (it was refused: 'every code of every level needs its token
    id'), with the same checks, and the same dead codes of level c."""
    import sid_frameworks_variants as fv

    _, files = written
    lcrec = files["lcrec"]
    model = fv.write_model_used_codes(tmp_path / "model")
    kw = dict(sids=lcrec["sids"], codebooks=lcrec["codebooks"], n_permutations=PERMUTATIONS)
    by_path = _judged(geodiag.check(model, **kw))
    assert _judged(geodiag.check(_rows(model), folder=model, **kw)) == by_path
    on_disk = geodiag.measure(model, sids=lcrec["sids"], codebooks=lcrec["codebooks"], neighbors=0)
    in_memory = geodiag.measure(
        _rows(model), folder=model, sids=lcrec["sids"], codebooks=lcrec["codebooks"], neighbors=0
    )
    dead = [lv.dead_codes for lv in on_disk.codebook.levels]
    assert dead[2] == list(range(fx.K - fx.DEAD_C, fx.K))
    assert [lv.dead_codes for lv in in_memory.codebook.levels] == dead
