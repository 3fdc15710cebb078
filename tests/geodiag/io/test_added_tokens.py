"""Which tokens are new, on bases that ship added tokens of their own (Qwen2.5, Qwen3).

Every checkpoint here is written by transformers itself: a tiny Qwen2 whose tokenizer
already has trained non-special added tokens (``<tool_call>``, ...) and a special one,
extended by the user with SID tokens through ``resize_token_embeddings``. The planted
facts (which ids were mean-resized, which landed on padding rows) come back exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny_models import tiny_lm, word_tokenizer
from typer.testing import CliRunner

from geodiag.analysis.checkpoint import measure_checkpoint
from geodiag.cli import app
from geodiag.io.sources.options import ReadOptions

pytestmark = pytest.mark.filterwarnings("ignore")  # transformers' own advice

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

WORDS = [f"w{i}" for i in range(120)]
BASE_ADDED = [
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
]
SIDS = [f"<a_{i}>" for i in range(8)] + [f"<b_{i}>" for i in range(8)]
D = 32


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def _bare_tokenizer():
    return word_tokenizer(len(WORDS))


def _tokenizer():
    fast = _bare_tokenizer()
    fast.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    fast.add_tokens(BASE_ADDED)  # non-special, as Qwen2.5 ships them
    return fast


def _write_base(root: Path, tied: bool, pad_to: int | None = None) -> Path:
    """A Qwen2-style base: its own added tokens have trained (distinct) rows."""
    tok = _tokenizer()
    model = tiny_lm(
        len(tok),
        hidden_size=D,
        intermediate_size=64,
        num_key_value_heads=1,
        tied=tied,
        seed=0,
        arch="qwen2",
    )
    if pad_to is not None:  # Qwen pads its matrix past the tokenizer
        model.resize_token_embeddings(len(tok), pad_to_multiple_of=pad_to, mean_resizing=False)
        with torch.no_grad():  # padding rows of a pretrained model: small, never trained
            g = torch.Generator().manual_seed(5)
            w = model.get_input_embeddings().weight
            w[len(tok) :] = torch.randn(w.shape[0] - len(tok), D, generator=g) * 1e-3
    path = root / f"base-{'tied' if tied else 'untied'}{'-padded' if pad_to else ''}"
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def _extend(base: Path, out: Path, *, special: list[str] = (), trained: bool = False, **kw):
    """The user's step: add SID tokens and resize (transformers' default mean_resizing)."""
    tok = transformers.AutoTokenizer.from_pretrained(base)
    model = transformers.AutoModelForCausalLM.from_pretrained(base)
    n_old = model.get_input_embeddings().weight.shape[0]
    tok.add_tokens(SIDS)
    if special:
        tok.add_special_tokens({"additional_special_tokens": list(special)})
    model.resize_token_embeddings(len(tok), **kw)
    if trained:  # stand-in for a real init: each new row its own start
        g = torch.Generator().manual_seed(3)
        with torch.no_grad():
            for emb in {model.get_input_embeddings(), model.get_output_embeddings()}:
                new = emb.weight[n_old:]
                new.copy_(torch.randn(new.shape, generator=g) * emb.weight.std())
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out, tok


def _absent_ids(ckpt: Path, base: Path) -> list[int]:
    """The reference: ids of the tokens in the checkpoint's tokenizer.json that the base's
    lacks, as the tokenizers library reads the files (transformers may add one on reload,
    e.g. Qwen2's ``<|endoftext|>``: the base's file lacks it, and its row is new)."""

    def vocab(folder: Path) -> dict[str, int]:
        t = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
        return t.get_vocab(with_added_tokens=True)

    old = vocab(base)
    return sorted(i for t, i in vocab(ckpt).items() if t not in old)


def _tokens(ckpt: Path, ids: list[int]) -> list[str]:
    return transformers.AutoTokenizer.from_pretrained(ckpt).convert_ids_to_tokens(ids)


def _checks(res) -> dict[tuple[str, str], dict]:
    (result,) = json.loads(res.stdout)["results"]
    return {(c["name"], c["matrix"]): c for c in result["checks"]}


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    root = tmp_path_factory.mktemp("qwen")
    tied, untied = _write_base(root, True), _write_base(root, False)
    return {
        "tied": tied,
        "untied": untied,
        "mean": _extend(tied, root / "mean", mean_resizing=True)[0],
        "mean-untied": _extend(untied, root / "mean-untied", mean_resizing=True)[0],
        "trained": _extend(tied, root / "trained", mean_resizing=True, trained=True)[0],
    }


def test_mean_resized_block_beside_trained_added_tokens_fails_without_base(qwen):
    """Before: n_new_tokens 24 and a PASS, the 8 trained rows hiding 16 identical ones."""
    res = run("check", qwen["mean"], "--json", "--permutations", 0)
    assert res.exit_code == 1, res.output
    c = _checks(res)[("n_untrained", "input")]
    assert c["status"] == "fail" and c["value"] == 16
    assert "<a_0>" in c["message"] and "<tool_call>" not in c["message"]
    rep = measure_checkpoint(qwen["mean"], read=ReadOptions())
    assert rep.n_new_tokens == 24 and rep.new_token_source == "tokenizer"
    u = rep.matrices[0].untrained
    tok = transformers.AutoTokenizer.from_pretrained(qwen["mean"])
    planted = sorted(tok.convert_tokens_to_ids(SIDS))
    assert u.n_untrained == 16 and u.n_trained == 8 and u.n_groups == 1
    assert u.groups[0].size == 16 and u.groups[0].ids == planted[:8]
    assert any("two populations" in n and "--base" in n for n in rep.notes)
    # The three block checks alone still pass: the trained rows carry them.
    assert all(
        _checks(res)[(n, "input")]["status"] == "pass"
        for n in ("effective_rank_ratio", "spread_relative", "mean_pairwise_cosine")
    )


def test_base_makes_the_new_tokens_exactly_those_it_lacks(qwen):
    rep = measure_checkpoint(qwen["mean"], read=ReadOptions(base=qwen["tied"]))
    absent = _absent_ids(qwen["mean"], qwen["tied"])
    assert rep.new_token_source == "base"
    assert rep.n_new_tokens == len(absent) >= 16
    u = rep.matrices[0].untrained
    assert u.n_untrained == len(absent) and u.untrained.ids == absent[:8]
    res = run("check", qwen["mean"], "--base", qwen["tied"], "--permutations", 0)
    assert res.exit_code == 1
    assert "[fail] spread_relative" in res.stdout  # the whole measured block is collapsed now
    assert f"all {len(absent)} new tokens" in res.stdout.lower()


def test_untied_head_new_rows_are_caught_too(qwen):
    res = run("check", qwen["mean-untied"], "--json", "--permutations", 0)
    assert res.exit_code == 1
    checks = _checks(res)
    assert checks[("n_untrained", "output")]["status"] == "fail"
    assert checks[("n_untrained", "output")]["value"] == 16


def test_trained_new_rows_pass_with_and_without_base(qwen):
    assert run("check", qwen["trained"], "--permutations", 0).exit_code == 0
    res = run("check", qwen["trained"], "--base", qwen["tied"], "--permutations", 0)
    assert res.exit_code == 0, res.output


def test_base_without_tokenizer_or_with_nothing_new_is_bad_input(qwen, tmp_path):
    (tmp_path / "empty").mkdir()
    res = run("check", qwen["mean"], "--base", tmp_path / "empty")
    assert res.exit_code == 2 and "no tokenizer.json" in res.stderr
    res = run("check", qwen["tied"], "--base", qwen["tied"])
    assert res.exit_code == 2 and "no new tokens" in res.stderr


def test_new_ids_on_the_base_padding_rows_are_named(tmp_path):
    """Qwen pads its matrix past the tokenizer; resizing to a size the padding already
    covers leaves those rows as they were: never initialized, never trained."""
    base = _write_base(tmp_path, True, pad_to=64)
    ckpt, tok = _extend(base, tmp_path / "on-padding", pad_to_multiple_of=64)
    ids = _absent_ids(ckpt, base)
    n_base_rows = transformers.AutoConfig.from_pretrained(base).vocab_size
    assert max(ids) < n_base_rows  # the planted case: every new id inside the old matrix
    rep = measure_checkpoint(ckpt, read=ReadOptions(base=base))
    u = rep.matrices[0].untrained
    assert u.unchanged_padding is not None and u.unchanged_padding.size == len(ids) >= 16
    assert u.unchanged_padding.ids == ids[:8]
    res = run("check", ckpt, "--base", base, "--permutations", 0)
    assert res.exit_code == 1 and "padding rows" in res.stdout


def test_special_added_tokens_are_named_and_measured_with_base(qwen, tmp_path):
    ckpt, _ = _extend(
        qwen["tied"],
        tmp_path / "sp",
        special=["<sid_begin>", "<sid_end>"],
        mean_resizing=True,
        trained=True,
    )
    rep = measure_checkpoint(ckpt, read=ReadOptions())
    assert rep.n_new_tokens == 24  # non-special only without a base: said in a note
    said = [f.message for f in rep.integrity if f.kind == "special_tokens_left_out"]
    assert (
        len(said) == 1 and "special token(s) not measured" in said[0] and "<sid_begin>" in said[0]
    )
    rep = measure_checkpoint(ckpt, read=ReadOptions(base=qwen["tied"]))
    absent = _absent_ids(ckpt, qwen["tied"])
    assert rep.n_new_tokens == len(absent) >= 18  # 16 SIDs and the 2 specials at least
    assert {"<sid_begin>", "<sid_end>"} <= {t for m in [rep] for t in _tokens(ckpt, absent)}


def test_only_special_added_tokens_says_they_exist(tmp_path):
    tok = _bare_tokenizer()
    model = tiny_lm(
        len(WORDS) + 1,
        hidden_size=D,
        intermediate_size=64,
        num_key_value_heads=1,
        tied=False,
        arch="qwen2",
    )
    tok.add_special_tokens({"additional_special_tokens": [f"<s_{i}>" for i in range(16)]})
    model.resize_token_embeddings(len(tok))
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    res = run("check", tmp_path / "m")
    assert res.exit_code == 2
    assert "added tokens are all special" in res.stderr and "<s_0>" in res.stderr
    assert "--base" in res.stderr
