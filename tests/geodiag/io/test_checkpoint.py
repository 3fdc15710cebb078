import json

import numpy as np
import pytest
from geodiag_fixtures import BASE_VOCAB, DIM, LEVELS, base_rows, planted_new_rows

from geodiag.errors import InputError
from geodiag.io.checkpoint import open_checkpoint
from geodiag.io.formats.safetensors import save_file
from geodiag.io.sources.options import ReadOptions
from geodiag.io.vocabulary.tokenizer import load_tokenizer

N_NEW = sum(k for _, k in LEVELS)


def read_new(ckpt):
    return ckpt.read_rows(ckpt.matrices[0], ckpt.new.ids)


def test_sidecar_gives_ids_levels_codes(make_ckpt):
    ckpt = open_checkpoint(make_ckpt("random"))
    assert ckpt.new.source == "sidecar" and ckpt.new.levels_source == "sidecar"
    np.testing.assert_array_equal(ckpt.new.ids, np.arange(BASE_VOCAB, BASE_VOCAB + N_NEW))
    assert ckpt.new.level_names == ["a", "b", "c"]
    assert ckpt.new.tokens[:2] == ["<a_0>", "<a_1>"] and ckpt.new.tokens[-1] == "<c_7>"
    assert set(ckpt.codebooks) == {"a", "b", "c"}
    assert ckpt.tied and [m.role for m in ckpt.matrices] == ["input"]
    np.testing.assert_allclose(
        read_new(ckpt), planted_new_rows("random", base_rows()).astype(np.float32)
    )


def test_tokenizer_added_tokens_and_level_names_without_sidecar(make_ckpt):
    ckpt = open_checkpoint(make_ckpt("random", with_sidecar=False, with_codebooks=False))
    assert ckpt.new.source == "tokenizer" and ckpt.new.levels_source == "token names"
    assert ckpt.new.base_vocab_size == BASE_VOCAB
    assert ckpt.new.level_names == ["a", "b", "c"]
    assert ckpt.new.codes.tolist() == [c for _, k in LEVELS for c in range(k)]
    assert "RSA skipped" in ckpt.codebooks_note
    assert ckpt.token(5) == " the"  # byte-level decoding of 'Ġthe'


def test_flags_pick_rows_when_nothing_else_does(make_ckpt):
    root = make_ckpt("random", with_sidecar=False, with_tokenizer=False, with_codebooks=False)
    with pytest.raises(InputError, match="cannot tell which rows are new"):
        open_checkpoint(root)
    ckpt = open_checkpoint(root, ReadOptions(new_tokens=(BASE_VOCAB, BASE_VOCAB + 10)))
    assert len(ckpt.new.ids) == 10 and ckpt.new.level_names == []
    ckpt = open_checkpoint(root, ReadOptions(base_vocab_size=BASE_VOCAB))
    assert len(ckpt.new.ids) == N_NEW and ckpt.new.tokens[0] == f"<id {BASE_VOCAB}>"


def test_custom_level_pattern(tmp_path, make_ckpt):
    root = make_ckpt("random", with_sidecar=False, with_codebooks=False)
    tok = json.loads((root / "tokenizer.json").read_text())
    for t in tok["added_tokens"][1:]:
        level, code = t["content"][1:-1].split("_")
        t["content"] = f"[SID-{level.upper()}{code}]"
    (root / "tokenizer.json").write_text(json.dumps(tok))
    assert open_checkpoint(root).new.level_names == []
    ckpt = open_checkpoint(
        root, ReadOptions(level_pattern=r"\[SID-(?P<level>[A-Z])(?P<code>\d+)\]")
    )
    assert ckpt.new.level_names == ["A", "B", "C"]
    with pytest.raises(InputError, match="named groups"):
        open_checkpoint(root, ReadOptions(level_pattern=r"(\d+)"))


@pytest.mark.parametrize("dtype", ["BF16", "F16"])
def test_half_precision_checkpoints(make_ckpt, dtype):
    ckpt = open_checkpoint(make_ckpt("random", dtype=dtype))
    assert ckpt.matrices[0].dtype == dtype
    rows = read_new(ckpt)
    want = planted_new_rows("random", base_rows())
    np.testing.assert_allclose(rows, want, rtol=1e-2, atol=1e-3)


def test_other_architectures_and_override(tmp_path):
    rows = np.random.default_rng(0).normal(size=(50, 8)).astype(np.float32)
    for name in ("transformer.wte.weight", "embeddings.word_embeddings.weight"):
        save_file({name: rows, "h.0.attn.weight": rows[:8]}, tmp_path / f"{name}.safetensors")
        ckpt = open_checkpoint(tmp_path / f"{name}.safetensors", ReadOptions(new_tokens=(40, 50)))
        assert ckpt.matrices[0].tensor == name
    save_file({"weird.table": rows}, tmp_path / "w.safetensors")
    with pytest.raises(InputError, match="no recognizable input embedding.*--tensor"):
        open_checkpoint(tmp_path / "w.safetensors", ReadOptions(new_tokens=(40, 50)))
    ckpt = open_checkpoint(
        tmp_path / "w.safetensors", ReadOptions(tensor="weird.table", new_tokens=(40, 50))
    )
    assert ckpt.matrices[0].tensor == "weird.table"


def test_untied_head_is_its_own_matrix(make_ckpt):
    head = np.random.default_rng(5).normal(size=(BASE_VOCAB + N_NEW, DIM))
    ckpt = open_checkpoint(make_ckpt("random", untied_head=head))
    assert not ckpt.tied and [m.tensor for m in ckpt.matrices] == [
        "model.embed_tokens.weight",
        "lm_head.weight",
    ]
    np.testing.assert_allclose(
        ckpt.read_rows(ckpt.matrices[1], ckpt.new.ids), head[BASE_VOCAB:].astype(np.float32)
    )


def test_sidecar_out_of_range_and_disagreement(make_ckpt):
    root = make_ckpt("random")
    side = json.loads((root / "semantic_ids.json").read_text())
    side["levels"][2]["token_ids"][-1] = 10_000
    (root / "semantic_ids.json").write_text(json.dumps(side))
    with pytest.raises(
        InputError, match=r"semantic_ids.json: sidecar disagrees with the tensors.*\[10000\]"
    ):
        open_checkpoint(root)
    side["levels"][2]["token_ids"][-1] = BASE_VOCAB  # id of <a_0> in tokenizer.json -> duplicate
    (root / "semantic_ids.json").write_text(json.dumps(side))
    with pytest.raises(InputError, match="repeat"):
        open_checkpoint(root)
    side["levels"][0]["token_ids"], side["levels"][1]["token_ids"] = (
        side["levels"][1]["token_ids"],
        side["levels"][0]["token_ids"],
    )
    side["levels"][2]["token_ids"][-1] = BASE_VOCAB + N_NEW - 1
    (root / "semantic_ids.json").write_text(json.dumps(side))
    with pytest.raises(InputError, match="disagrees with tokenizer.json: id 308 is '<b_0>'"):
        open_checkpoint(root)


def test_codebooks_with_wrong_number_of_codes(make_ckpt):
    root = make_ckpt("random")
    save_file(
        {"a": np.ones((8, 6)), "b": np.ones((9, 6)), "c": np.ones((8, 6))},
        root / "codebooks.safetensors",
    )
    with pytest.raises(InputError, match="codebook 'b' has 9 codes, but level 'b' has 8"):
        open_checkpoint(root)


def test_config_hidden_size_mismatch(make_ckpt):
    root = make_ckpt("random")
    cfg = json.loads((root / "config.json").read_text())
    cfg["hidden_size"] = 64
    (root / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="config.json says hidden_size 64"):
        open_checkpoint(root)


def test_tokenizer_reader_counts(make_ckpt):
    tok = load_tokenizer(make_ckpt("random") / "tokenizer.json")
    assert len(tok) == BASE_VOCAB + N_NEW
    assert [t.content for t in tok.added_non_special()][:2] == ["<a_0>", "<a_1>"]


def test_codebooks_pair_by_code_for_a_partial_range(make_ckpt):
    root = make_ckpt("grounded", with_sidecar=False)
    ckpt = open_checkpoint(root, ReadOptions(new_tokens=(BASE_VOCAB + 3, BASE_VOCAB + 12)))
    assert ckpt.new.level_names == ["a", "b"]
    from geodiag_fixtures import codebooks

    np.testing.assert_array_equal(ckpt.codebooks["a"], codebooks()["a"][3:8])
    np.testing.assert_array_equal(ckpt.codebooks["b"], codebooks()["b"][:4])


def test_tokenizer_merges_are_skipped_without_changing_anything(tmp_path):
    import json as _json

    from geodiag.io.vocabulary.tokenizer import _without_merges

    tok = {
        "added_tokens": [{"id": 4, "content": "<a_0>", "special": False}],
        "model": {
            "type": "BPE",
            "vocab": {"merges": 0, "[": 1, '"]': 2, "x\\\\": 3},
            "merges": [["merges", "["], ["]", '"]'], "x\\\\ ]"],
        },
        "decoder": {"type": "ByteLevel"},
        "after": [1, [2]],
    }
    text = _json.dumps(tok)
    stripped = _json.loads(_without_merges(text))
    assert stripped["model"]["merges"] == []
    del tok["model"]["merges"], stripped["model"]["merges"]
    assert stripped == tok
    (tmp_path / "tokenizer.json").write_text(text)
    info = load_tokenizer(tmp_path / "tokenizer.json")
    assert info.token(0) == "merges" and info.token(2) == '"]' and info.token(4) == "<a_0>"


@pytest.mark.parametrize("dtype", ["BF16", "F16", None])
def test_vocabulary_scan_blocks_are_exact_float32(make_ckpt, dtype):
    """The neighbour scan reads float32 blocks (converted once from BF16/F16) that hold
    the stored values exactly, and its nearest tokens equal a float64 brute force."""
    from geodiag.analysis.checkpoint import measure_checkpoint
    from geodiag.analysis.options import AnalyzeOptions

    path = make_ckpt("random", dtype=dtype)
    ckpt = open_checkpoint(path)
    m = ckpt.matrices[0]
    blocks = list(ckpt.iter_original(m, chunk=64))
    assert all(rows.dtype == np.float32 for _, rows in blocks)
    ids = np.concatenate([i for i, _ in blocks])
    scanned = np.concatenate([r for _, r in blocks]).astype(np.float64)
    np.testing.assert_array_equal(ids, np.arange(ckpt.new.base_vocab_size))
    np.testing.assert_array_equal(scanned, ckpt.read_rows(m, ids))  # exact, not close
    report = measure_checkpoint(path, AnalyzeOptions(n_permutations=10, neighbors_k=3))
    new = ckpt.read_rows(m, ckpt.new.ids)
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
    cos = unit(new) @ unit(scanned).T  # (n, V) float64
    for tn, row in zip(report.matrices[0].neighbors, cos, strict=True):
        want = sorted(range(len(ids)), key=lambda j: (-row[j], j))[:3]
        assert [n.id for n in tn.nearest] == want
        np.testing.assert_allclose([n.cosine for n in tn.nearest], row[want], atol=1e-13)
