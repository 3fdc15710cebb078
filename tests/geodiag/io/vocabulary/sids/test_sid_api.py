"""A framework's SID map through the Python API (a path, rows in memory) and the Trainer
callback: the same RSA per level as our sidecar route."""

from __future__ import annotations

import json

import pytest
import sid_frameworks as fx

import geodiag
from geodiag.errors import InputError
from geodiag.io.formats.safetensors import SafetensorsFile


class WordTokenizer:
    """The two methods of a transformers tokenizer that naming rows needs."""

    def __init__(self, path) -> None:
        data = json.loads(path.read_text())
        self.vocab = data["model"]["vocab"] | {t["content"]: t["id"] for t in data["added_tokens"]}
        self.names = {i: t for t, i in self.vocab.items()}

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocab)

    def convert_ids_to_tokens(self, token_id: int) -> str | None:
        return self.names.get(token_id)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("api")
    files = {"sidecar": fx.write_sidecar(out / "sidecar")}
    files["etegrec"] = fx.write_etegrec(out / "etegrec")
    files["etegrec"]["model"] = fx.write_model(out / "etegrec" / "model", "letter")
    ours = geodiag.measure(files["sidecar"], neighbors=0)
    return files, {lv.name: lv.rsa.spearman for lv in ours.matrices[0].levels}


def test_measure_a_path_with_sids(written):
    files, want = written
    f = files["etegrec"]
    got = geodiag.measure(f["model"], sids=f["sids"], codebooks=f["codebooks"], neighbors=0)
    assert {lv.name: lv.rsa.spearman for lv in got.matrices[0].levels} == pytest.approx(
        want, abs=1e-9
    )
    assert got.codebook.levels[2].dead_codes == list(range(fx.K - fx.DEAD_C, fx.K))
    assert geodiag.check(f["model"], sids=f["sids"], codebooks=f["codebooks"]).passed


def test_measure_rows_in_memory_with_sids_and_a_tokenizer(written):
    files, want = written
    f = files["etegrec"]
    rows = SafetensorsFile(f["model"] / "model.safetensors").read("model.embed_tokens.weight")
    tok = WordTokenizer(f["model"] / "tokenizer.json")
    got = geodiag.measure(
        rows, sids=f["sids"], codebooks=f["codebooks"], tokenizer=tok, neighbors=0
    )
    assert {lv.name: lv.rsa.spearman for lv in got.matrices[0].levels} == pytest.approx(
        want, abs=1e-9
    )
    with pytest.raises(InputError, match="tokenizer="):
        geodiag.measure(rows, sids=f["sids"], codebooks=f["codebooks"])


def test_the_callback_takes_sids(written):
    pytest.importorskip("transformers")
    from geodiag.callback.trainer import GeodiagCallback

    files, want = written
    f = files["etegrec"]
    rows = SafetensorsFile(f["model"] / "model.safetensors").read("model.embed_tokens.weight")
    cb = GeodiagCallback(sids=f["sids"], codebooks=f["codebooks"], rsa_levels=["a", "b", "c"])
    with pytest.raises(InputError, match="processing_class"):
        cb.measure(rows)
    cb._tokenizer = WordTokenizer(f["model"] / "tokenizer.json")  # what on_train_begin sets
    structure = cb.measure(rows)["input"]
    assert structure["rsa"] == pytest.approx(want, abs=1e-9)


def test_the_callback_describes_a_save_in_the_frameworks_spelling(written, tmp_path):
    """A save described from OpenOneRec's files keeps its <s_a_12> spelling and its items:
    geodiag reads the checkpoint back with no flag, with the same figures."""
    import shutil

    from geodiag.callback.checkpoints import describe_checkpoint
    from geodiag.io.vocabulary.sid_index import read_foreign

    files, want = written
    f = fx.write_openonerec(tmp_path / "openonerec")
    folder = fx.write_model(tmp_path / "save", "s_letter", "structured", ("<|sid_begin|>",))
    found = read_foreign(f["sids"], f["codebooks"], folder)
    describe_checkpoint(folder, 7, found.sids, found.codebooks, None)
    got = geodiag.measure(folder, neighbors=0)
    assert {lv.name: lv.rsa.spearman for lv in got.matrices[0].levels} == pytest.approx(
        want, abs=1e-9
    )
    assert got.codebook.n_items == fx.N_ITEMS
    assert json.loads((folder / "semantic_ids.json").read_text())["levels"][0]["tokens"][3] == (
        "<s_a_3>"
    )
    shutil.rmtree(folder)
