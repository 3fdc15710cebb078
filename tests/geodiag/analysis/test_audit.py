"""The vocabulary audit on files written by the libraries themselves: transformers'
save_pretrained (a config vocab_size and a head that disagree with the embedding, which
transformers' own from_pretrained then refuses), PEFT adapters (trainable_token_indices
that miss a new token, modules_to_save without the head), llama.cpp's gguf-py writer
(SIDs typed CONTROL); and no finding on healthy checkpoints (a resized tiny model, padded
or not, its adapters done right, SmolLM2 as cached by gti)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from geodiag_fixtures import BASE_VOCAB, SID_NAMES, base_rows, planted_new_rows, write_gguf
from tiny_models import tiny_lm, word_tokenizer
from typer.testing import CliRunner

from geodiag.analysis.audit import audit
from geodiag.cli import app
from geodiag.io.checkpoint import open_checkpoint
from geodiag.io.sources.options import ReadOptions

pytestmark = pytest.mark.filterwarnings("ignore")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

N_WORDS, N_NEW, D = 47, 6, 16
V0 = N_WORDS + 1  # <unk> and the words
NEW = list(range(V0, V0 + N_NEW))
SIDS = [f"<a_{i}>" for i in range(N_NEW)]
AUDIT_KINDS = {
    "config_vocab_size",
    "head_rows",
    "tokenizer_past_rows",
    "adapter_tokens_not_trained",
    "adapter_head_not_trained",
    "gguf_control_tokens",
}


def _extended(tied: bool = True, pad_to: int | None = None):
    """A tiny model and its tokenizer, extended by the SIDs as a user does: add_tokens,
    then resize_token_embeddings(len(tokenizer)); the new rows set apart (trained-looking)."""
    tok = word_tokenizer(N_WORDS)
    tok.add_tokens(SIDS)
    model = tiny_lm(V0, hidden_size=D, head_dim=8, tied=tied, seed=0)
    model.resize_token_embeddings(len(tok), pad_to_multiple_of=pad_to, mean_resizing=False)
    with torch.no_grad():
        emb = model.get_input_embeddings().weight
        emb[V0 : V0 + N_NEW] = torch.randn(N_NEW, D, generator=torch.Generator().manual_seed(1))
    return model, tok


def _save(model, tok, root: Path) -> Path:
    model.save_pretrained(root)
    tok.save_pretrained(root)
    return root


def _kinds(path: Path, **read) -> dict:
    return {f.kind: f for f in audit(open_checkpoint(path, ReadOptions(**read)))}


def _refused_by_transformers(path: Path) -> None:
    """What the findings say of such a file: transformers will not load it."""
    with pytest.raises(RuntimeError, match="mismatch"):
        transformers.AutoModelForCausalLM.from_pretrained(path)


@pytest.mark.parametrize("pad_to", [None, 64], ids=["exact", "padded"])
@pytest.mark.parametrize("tied", [True, False])
def test_a_resized_checkpoint_has_no_audit_finding(tmp_path, tied, pad_to):
    root = _save(*_extended(tied, pad_to), tmp_path / "ok")
    assert _kinds(root) == {}
    # padded: the rows past the tokenizer are padding_rows' alone, not the audit's
    res = CliRunner().invoke(app, ["metrics", str(root), "--json", "--permutations", "0"])
    assert res.exit_code == 0, res.output
    kinds = {f["kind"] for f in json.loads(res.stdout)["integrity"]}
    assert not kinds & AUDIT_KINDS and ("padding_rows" in kinds) == (pad_to is not None)


def test_config_vocab_size_that_is_not_the_embedding_rows(tmp_path):
    model, tok = _extended()
    model.config.vocab_size = V0  # the embedding grew, the config did not (set by hand)
    root = _save(model, tok, tmp_path / "cfg")
    f = _kinds(root)["config_vocab_size"]
    assert f.status == "warn" and f.count == N_NEW
    assert f"vocab_size {V0} but 'model.embed_tokens.weight' has {V0 + N_NEW} rows" in f.message
    assert "resize_token_embeddings" in f.message
    _refused_by_transformers(root)


def test_untied_head_with_other_rows_than_the_embedding(tmp_path):
    model, tok = _extended(tied=False)
    model.lm_head = torch.nn.Linear(D, V0, bias=False)  # a head left at the old size
    root = _save(model, tok, tmp_path / "head")
    ckpt = open_checkpoint(root)  # before: exit 2, "output head has 48 rows ..."
    assert [m.role for m in ckpt.matrices] == ["input"] and ckpt.head_left_out.n_rows == V0
    f = {f.kind: f for f in audit(ckpt)}["head_rows"]
    assert f.status == "warn" and f.count == N_NEW and f.tokens.ids == NEW
    assert "cannot be emitted" in f.message and "resize_token_embeddings" in f.message
    _refused_by_transformers(root)


def test_added_tokens_past_the_rows(tmp_path):
    model, tok = _extended()
    tok.add_special_tokens({"additional_special_tokens": ["<|sid_begin|>", "<|sid_end|>"]})
    root = _save(model, tok, tmp_path / "past")  # no second resize
    f = _kinds(root)["tokenizer_past_rows"]
    assert f.count == 2 and f.tokens.tokens == ["<|sid_begin|>", "<|sid_end|>"]
    assert f"past the embedding's {V0 + N_NEW} rows" in f.message


def test_findings_reach_the_json_the_text_table_and_the_report(tmp_path):
    model, tok = _extended()
    model.config.vocab_size = V0
    root = _save(model, tok, tmp_path / "cfg")
    res = CliRunner().invoke(app, ["metrics", str(root), "--json", "--permutations", "0"])
    assert res.exit_code == 0, res.output
    (f,) = [f for f in json.loads(res.stdout)["integrity"] if f["kind"] == "config_vocab_size"]
    assert f["status"] == "warn" and f["count"] == N_NEW
    res = CliRunner().invoke(app, ["metrics", str(root), "--permutations", "0"])
    assert f"warning: config.json says vocab_size {V0}" in res.stdout
    html = tmp_path / "r.html"
    res = CliRunner().invoke(app, ["report", str(root), "-o", str(html), "--permutations", "0"])
    assert res.exit_code == 0, res.output
    assert f"config.json says vocab_size {V0}" in html.read_text()


def test_the_gate_fails_on_a_disagreement_and_passes_a_resized_checkpoint(tmp_path):
    """max_vocabulary_disagreements (0): the untied head left at the old size, which
    from_pretrained refuses, fails `geodiag check` (exit 1) naming the finding; the same
    model resized properly passes that check; the threshold raised lets it pass."""
    model, tok = _extended(tied=False)
    model.lm_head = torch.nn.Linear(D, V0, bias=False)
    root = _save(model, tok, tmp_path / "head")
    res = CliRunner().invoke(app, ["check", str(root), "--json", "--permutations", "0"])
    assert res.exit_code == 1, res.output
    (c,) = [
        c
        for c in json.loads(res.stdout)["results"][0]["checks"]
        if c["name"] == "vocabulary_disagreements"
    ]
    assert (c["status"], c["value"], c["threshold"]) == ("fail", 1, 0)
    assert "head_rows: the untied output head" in c["message"]
    args = ["check", str(root), "--max-vocabulary-disagreements", "1", "--json"]
    res = CliRunner().invoke(app, [*args, "--permutations", "0"])
    (c,) = [
        c
        for c in json.loads(res.stdout)["results"][0]["checks"]
        if c["name"] == "vocabulary_disagreements"
    ]
    assert c["status"] == "pass"
    good = _save(*_extended(tied=False), tmp_path / "good")
    res = CliRunner().invoke(app, ["check", str(good), "--json", "--permutations", "0"])
    (c,) = [
        c
        for c in json.loads(res.stdout)["results"][0]["checks"]
        if c["name"] == "vocabulary_disagreements"
    ]
    assert (c["status"], c["value"]) == ("pass", 0)


# -- PEFT adapters -----------------------------------------------------------------------


def _adapter(tmp_path: Path, config, tied: bool = False, resized_base: bool = True) -> Path:
    """A PEFT adapter over a base on disk: the extended model itself (``resized_base``), or
    the model before the extension, which the adapter's own folder then names the
    tokenizer of (resized in memory before PEFT wraps it, as PEFT's docs have it)."""
    peft = pytest.importorskip("peft")
    model, tok = _extended(tied)
    if resized_base:
        base = _save(model, tok, tmp_path / "base")
    else:
        base = _save(
            tiny_lm(V0, hidden_size=D, head_dim=8, tied=tied),
            word_tokenizer(N_WORDS),
            tmp_path / "base",
        )
    model = transformers.AutoModelForCausalLM.from_pretrained(base)
    model.resize_token_embeddings(len(tok), mean_resizing=False)
    folder = tmp_path / "adapter"
    peft.get_peft_model(model, config).save_pretrained(folder)
    if not resized_base:
        tok.save_pretrained(folder)
    return folder


def test_trainable_token_indices_that_miss_a_new_token(tmp_path):
    peft = pytest.importorskip("peft")
    cfg = peft.LoraConfig(r=4, target_modules=["q_proj"], trainable_token_indices=NEW[:-1])
    f = _kinds(_adapter(tmp_path, cfg, tied=True))["adapter_tokens_not_trained"]
    assert f.status == "warn" and f.count == 1 and f.tokens.tokens == [SIDS[-1]]
    assert "trainable_token_indices" in f.message and "not among the rows measured" in f.message
    # Over the base before its resize, the row left out is nowhere on disk: bad input
    folder = _adapter(tmp_path / "mem", cfg, tied=True, resized_base=False)
    res = CliRunner().invoke(app, ["metrics", str(folder)])
    assert res.exit_code == 2 and "left out of trainable_token_indices" in res.output


def test_lora_over_a_base_resized_in_memory_trains_no_new_row(tmp_path):
    """PEFT saves the resized embedding beside a LoRA on q_proj (save_embedding_layers):
    stored, not trained. geodiag reads it as a whole matrix; the config says it is no
    modules_to_save."""
    peft = pytest.importorskip("peft")
    cfg = peft.LoraConfig(r=4, target_modules=["q_proj"])
    f = _kinds(_adapter(tmp_path, cfg, resized_base=False))["adapter_tokens_not_trained"]
    assert f.count == N_NEW and "trains none of its rows" in f.message


def test_modules_to_save_without_the_untied_head(tmp_path):
    peft = pytest.importorskip("peft")
    cfg = peft.LoraConfig(r=4, target_modules=["q_proj"], modules_to_save=["embed_tokens"])
    f = _kinds(_adapter(tmp_path, cfg), new_tokens=(V0, V0 + N_NEW))["adapter_head_not_trained"]
    assert f.status == "warn" and "untied output head 'lm_head.weight'" in f.message


def test_modules_to_save_of_a_tied_embedding_without_ensure_weight_tying(tmp_path):
    peft = pytest.importorskip("peft")
    cfg = peft.LoraConfig(r=4, target_modules=["q_proj"], modules_to_save=["embed_tokens"])
    f = _kinds(_adapter(tmp_path, cfg, tied=True), new_tokens=(V0, V0 + N_NEW))
    assert "ensure_weight_tying" in f["adapter_head_not_trained"].message


@pytest.mark.parametrize(
    "options",
    [
        dict(trainable_token_indices=NEW),
        dict(trainable_token_indices={"embed_tokens": NEW, "lm_head": NEW}),
        dict(modules_to_save=["embed_tokens", "lm_head"]),
    ],
    ids=["tied-trainable-tokens", "untied-both", "untied-modules-to-save"],
)
def test_adapters_done_right_have_no_audit_finding(tmp_path, options):
    peft = pytest.importorskip("peft")
    tied = "lm_head" not in json.dumps(options)
    cfg = peft.LoraConfig(r=4, target_modules=["q_proj"], **options)
    folder = _adapter(tmp_path, cfg, tied=tied)
    assert _kinds(folder, new_tokens=(V0, V0 + N_NEW)) == {}
    if tied:
        assert _kinds(_adapter(tmp_path / "mem", cfg, tied=True, resized_base=False)) == {}
    cfg = peft.LoraConfig(
        r=4, target_modules=["q_proj"], modules_to_save=["embed_tokens"], ensure_weight_tying=True
    )
    assert _kinds(_adapter(tmp_path / "ewt", cfg, tied=True), new_tokens=(V0, V0 + N_NEW)) == {}


# -- GGUF --------------------------------------------------------------------------------


def _gguf(tmp_path: Path, types_of_new: list[int]) -> Path:
    emb = np.concatenate([base_rows(), planted_new_rows("grounded", base_rows())])
    n_new = len(emb) - BASE_VOCAB
    types = [3] + [1] * (BASE_VOCAB - 1) + types_of_new
    assert len(types_of_new) == n_new
    tmp_path.mkdir(exist_ok=True)
    return write_gguf(tmp_path / "m.gguf", emb, qtype="Q8_0", types=types)


def test_sids_typed_control_in_a_gguf(tmp_path):
    n_new = len(SID_NAMES)
    path = _gguf(tmp_path, [3] * 4 + [4] * (n_new - 4))  # CONTROL, then USER_DEFINED
    new = (BASE_VOCAB, BASE_VOCAB + n_new)  # unnamed, the new tokens are the USER_DEFINED
    f = _kinds(path, new_tokens=new)["gguf_control_tokens"]
    assert f.status == "warn" and f.count == 4 and f.tokens.tokens == SID_NAMES[:4]
    assert "parse_special" in f.message and "add_tokens" in f.message
    assert "gguf_control_tokens" not in _kinds(_gguf(tmp_path / "ok", [4] * n_new), new_tokens=new)


# -- a real checkpoint ---------------------------------------------------------------------


def test_smollm2_has_no_audit_finding():
    from gti.models.smollm2 import MARKER, model_dir

    root = model_dir()
    if not (root / MARKER).is_file():
        pytest.skip("SmolLM2 not converted in gti's cache (gti's slow tests convert it once)")
    n = json.loads((root / "config.json").read_text())["vocab_size"]
    assert audit(open_checkpoint(root, ReadOptions(new_tokens=(n - 64, n)))) == []
