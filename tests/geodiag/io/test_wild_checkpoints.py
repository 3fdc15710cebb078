"""Checkpoints as other stacks leave them (issue 29), written by the real libraries:
transformers' save_pretrained (F16 overflow, a padded vocabulary the tokenizer grew into,
a forgotten resize), torch.distributed.checkpoint, the Hub cache layout, a Git LFS pointer,
and a sentencepiece folder. Each gets a right verdict or a one-line exit 2 naming the
format and the way out."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from geodiag_fixtures import one_line_exit_2
from tiny_models import save, tiny_lm, word_tokenizer
from typer.testing import CliRunner

from geodiag.analysis.checkpoint import measure_checkpoint
from geodiag.analysis.options import AnalyzeOptions
from geodiag.cli import app
from geodiag.io.sources.options import ReadOptions

pytestmark = pytest.mark.filterwarnings("ignore")  # transformers' own advice

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

WORDS = [f"w{i}" for i in range(120)]
SIDS = [f"<a_{i}>" for i in range(12)] + [f"<b_{i}>" for i in range(12)]
D = 32


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def _tokenizer():
    return word_tokenizer(len(WORDS))


def _pretrained(n_rows: int, seed: int = 0):
    """A tiny Llama whose original rows look pretrained: norms spread over a factor of a
    few (a lognormal scale per row), unlike fresh init draws, whose norms concentrate."""
    model = tiny_lm(
        n_rows, hidden_size=D, intermediate_size=64, num_key_value_heads=1, tied=True, seed=seed
    )
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        w = model.get_input_embeddings().weight  # (n_rows, D)
        scale = torch.exp(0.5 * torch.randn(w.shape[0], 1, generator=g))
        w.copy_(torch.randn(w.shape, generator=g) * 0.05 * scale + 0.01)
    return model


def _extended(path: Path, *, trained: bool, dtype=None, inf_rows=()) -> Path:
    """The user's step, resize and init done right: SIDs added, each new row its own start."""
    tok = _tokenizer()
    n_old = len(tok)
    tok.add_tokens(SIDS)
    model = _pretrained(n_old)
    model.resize_token_embeddings(len(tok), mean_resizing=False)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        w = model.get_input_embeddings().weight
        if trained:
            w[n_old:] = torch.randn(len(SIDS), D, generator=g) * w[:n_old].std()
        else:
            w[n_old:] = w[:n_old].mean(dim=0)
        for i in inf_rows:
            w[i] = 7e4  # past float16's 65,504: Inf once saved in float16
    return save(model, path, tok, dtype)


# ---- 1. NaN/Inf original rows -------------------------------------------------------------


@pytest.fixture(scope="module")
def f16_overflow(tmp_path_factory):
    return _extended(
        tmp_path_factory.mktemp("f16") / "m", trained=True, dtype=torch.float16, inf_rows=(3, 7)
    )


def test_inf_original_rows_are_bad_input_naming_the_ids(f16_overflow):
    from safetensors.numpy import load_file

    w = load_file(str(f16_overflow / "model.safetensors"))["model.embed_tokens.weight"]
    assert np.flatnonzero(~np.isfinite(w).all(axis=1)).tolist() == [3, 7]  # the planted fact
    line = one_line_exit_2(run("check", f16_overflow, "--permutations", 0))
    assert "2 original rows" in line and "[3, 7]" in line and "--allow-nonfinite" in line
    one_line_exit_2(run("metrics", f16_overflow, "--permutations", 0))


def test_allow_nonfinite_drops_original_rows_and_every_command_says_so(f16_overflow, tmp_path):
    res = run("check", f16_overflow, "--allow-nonfinite", "--permutations", 0)
    assert res.exit_code == 0, res.output
    assert "dropped: 2 NaN/Inf original rows (ids 3, 7;" in res.stdout
    res = run("metrics", f16_overflow, "--allow-nonfinite", "--permutations", 0, "--json")
    (m,) = json.loads(res.stdout)["matrices"]
    assert m["nonfinite_original_rows_dropped"] == 2 and m["nonfinite_original_ids"] == [3, 7]
    out = tmp_path / "r.html"
    res = run("report", f16_overflow, "--allow-nonfinite", "--permutations", 0, "-o", out)
    assert res.exit_code == 0, res.output
    assert "non-finite original rows dropped (ids 3, 7)" in out.read_text()


def test_the_read_flag_reaches_the_reader_through_every_entry(f16_overflow):
    """The option is held once (ReadOptions): AnalyzeOptions() beside it cannot undo it."""
    import geodiag

    read = ReadOptions(allow_nonfinite=True)
    rep = measure_checkpoint(f16_overflow, AnalyzeOptions(n_permutations=0), read=read)
    assert rep.matrices[0].nonfinite_original_rows_dropped == 2
    rep = geodiag.measure(f16_overflow, read=read, n_permutations=0)
    assert rep.matrices[0].nonfinite_original_rows_dropped == 2
    assert geodiag.check(f16_overflow, read=read, n_permutations=0).passed
    from geodiag.errors import InputError

    with pytest.raises(InputError, match="original rows"):
        geodiag.check(f16_overflow, n_permutations=0)


def test_every_reading_option_has_one_home():
    from dataclasses import fields

    from geodiag.outputs.report import ReportOptions

    read = {f.name for f in fields(ReadOptions)}
    for other in (AnalyzeOptions, ReportOptions):
        assert not read & {f.name for f in fields(other)}, other


def test_every_read_option_reaches_open_checkpoint(monkeypatch, f16_overflow):
    """analyze, measure and check hand the ReadOptions they are given to the reader as
    they are (a spy on open_checkpoint in each module that calls it)."""
    from dataclasses import fields

    import geodiag
    import geodiag.analysis.checkpoint
    import geodiag.api
    from geodiag.io import checkpoint as ckpt_mod

    seen = []

    def spy(path, opts=None, declared=None):
        seen.append(opts)
        return ckpt_mod.open_checkpoint(path, opts, declared)

    monkeypatch.setattr(geodiag.analysis.checkpoint, "open_checkpoint", spy)
    monkeypatch.setattr(geodiag.api, "open_checkpoint", spy)
    values = {
        "tensor": "model.embed_tokens.weight",
        "new_tokens": (121, 145),
        "base_vocab_size": 121,
        "level_pattern": r"^<(?P<level>[a-z])_(?P<code>\d+)>$",
        "allow_nonfinite": True,
    }
    for f in fields(ReadOptions):
        if f.name not in values:
            continue  # path options: covered by their own tests
        read = ReadOptions(**{"allow_nonfinite": True, f.name: values[f.name]})
        for call in (
            lambda r: measure_checkpoint(f16_overflow, AnalyzeOptions(n_permutations=0), read=r),
            lambda r: geodiag.measure(f16_overflow, read=r, n_permutations=0),
            lambda r: geodiag.check(f16_overflow, read=r, n_permutations=0),
        ):
            seen.clear()
            call(read)
            assert seen and getattr(seen[0], f.name) == values[f.name], f.name


# ---- 2. new tokens on a padded vocabulary's unused rows ------------------------------------


def _padded_base(root: Path) -> Path:
    """A base whose matrix runs past its tokenizer (Qwen2.5 ships 271 such rows): the rows
    past it are init draws that no token ever trained."""
    tok = _tokenizer()
    model = _pretrained(192)
    g = torch.Generator().manual_seed(9)
    with torch.no_grad():
        w = model.get_input_embeddings().weight
        w[len(tok) :] = torch.randn(192 - len(tok), D, generator=g) * 0.02
    return save(model, root / "base", tok)


def _grow_tokenizer(base: Path, out: Path, *, trained: bool) -> Path:
    """LLaMA-Factory's step: add the tokens, resize only when the matrix is too small
    (here it is not: the new ids land on the base's padding rows, left as they were)."""
    tok = transformers.AutoTokenizer.from_pretrained(base)
    model = transformers.AutoModelForCausalLM.from_pretrained(base)
    tok.add_tokens(SIDS)
    if len(tok) > model.get_input_embeddings().weight.shape[0]:
        model.resize_token_embeddings(len(tok))
    if trained:
        ids = tok.convert_tokens_to_ids(SIDS)
        g = torch.Generator().manual_seed(4)
        with torch.no_grad():
            w = model.get_input_embeddings().weight
            w[ids] = w[: ids[0]][torch.randperm(ids[0], generator=g)[: len(ids)]] * 1.1
    return save(model, out, tok)


@pytest.fixture(scope="module")
def padded(tmp_path_factory):
    root = tmp_path_factory.mktemp("padded")
    base = _padded_base(root)
    return {
        "base": base,
        "untouched": _grow_tokenizer(base, root / "untouched", trained=False),
        "trained": _grow_tokenizer(base, root / "trained", trained=True),
    }


def test_new_tokens_left_on_padding_rows_warn_without_base_and_fail_with_it(padded):
    """Without --base the files suggest it (the norms' KS test): a statistic, so a warning
    that names --base; with it, the rows equal the base's padding rows: proof, a FAIL."""
    res = run("check", padded["untouched"], "--permutations", 0, "--json")
    assert res.exit_code == 0, res.output
    (result,) = json.loads(res.stdout)["results"]
    c = next(c for c in result["checks"] if c["name"] == "n_untrained")
    assert c["status"] == "warn" and c["value"] == 0
    assert f"{len(SIDS)} look like the" in c["message"]
    assert "unused padding rows past the tokenizer" in c["message"] and "--base" in c["message"]
    u = (
        measure_checkpoint(padded["untouched"], AnalyzeOptions(n_permutations=0))
        .matrices[0]
        .untrained
    )
    assert u.padding.n_padding == 192 - 121 - len(SIDS)
    assert u.padding.p_padding_vs_vocabulary < 0.01 <= u.padding.p_new_vs_padding
    # With --base the same rows are named one by one, as before.
    res = run("check", padded["untouched"], "--base", padded["base"], "--permutations", 0)
    assert res.exit_code == 1 and "the base's padding rows, bit for bit unchanged" in res.stdout


def test_trained_rows_on_padding_pass_and_the_note_asks_for_base(padded):
    res = run("check", padded["trained"], "--permutations", 0)
    assert res.exit_code == 0, res.output
    res = run("metrics", padded["trained"], "--permutations", 0)
    note = next(line for line in res.stdout.splitlines() if "unused rows past" in line)
    assert "47 unused rows past the tokenizer's 145 tokens" in note and "--base" in note


def test_padding_verdict_names_the_cause_not_a_resize_option(padded):
    res = run("check", padded["untouched"], "--permutations", 0)
    verdict = next(line for line in res.stdout.splitlines() if "verdict:" in line)
    assert "padding rows" in verdict and "mean_resizing" not in verdict
    assert "desc_init" not in verdict and "--base BASE" in verdict
    res = run("check", padded["untouched"], "--permutations", 0, "--base", padded["base"])
    verdict = next(line for line in res.stdout.splitlines() if "verdict:" in line)
    assert "padding rows" in verdict and "mean_resizing" not in verdict


# ---- 6. a tokenizer larger than the embedding ---------------------------------------------


def test_forgotten_resize_names_both_sizes_and_the_fix(tmp_path):
    tok = _tokenizer()
    model = _pretrained(len(tok))
    tok.add_tokens(SIDS)  # and no resize_token_embeddings
    ckpt = save(model, tmp_path / "m", tok)
    line = one_line_exit_2(run("check", ckpt))
    assert f"the tokenizer has {len(tok)} tokens but the embedding has 121 rows" in line
    assert "resize_token_embeddings(len(tokenizer))" in line


# ---- 7. smaller wording ---------------------------------------------------------------------


def test_base_with_the_same_tokenizer_suggests_new_tokens(tmp_path):
    tok = _tokenizer()
    ckpt = save(_pretrained(len(tok)), tmp_path / "m", tok)
    line = one_line_exit_2(run("check", ckpt, "--base", ckpt))
    assert "no new tokens to measure" in line and "--new-tokens START:END" in line


def test_zero_rows_are_called_zero_not_a_mean_init(tmp_path):
    tok = _tokenizer()
    n_old = len(tok)
    tok.add_tokens(SIDS)
    model = _pretrained(n_old)
    model.resize_token_embeddings(len(tok), mean_resizing=False)
    with torch.no_grad():
        model.get_input_embeddings().weight[n_old:] = 0
    ckpt = save(model, tmp_path / "zero", tok)
    res = run("check", ckpt, "--permutations", 0)
    assert res.exit_code == 1
    verdict = next(line for line in res.stdout.splitlines() if "verdict:" in line)
    assert "zero" in verdict and "mean init" not in verdict and "Unsloth" not in verdict


def test_rsa_skip_is_said_once_per_level_without_repeating_itself(tmp_path):
    ckpt = _extended(tmp_path / "m", trained=True)
    res = run("check", ckpt, "--permutations", 0)
    skips = [line for line in res.stdout.splitlines() if "[skip] rsa" in line.lower()]
    assert skips and all(line.lower().count("rsa skipped") <= 1 for line in skips), skips


def test_sentencepiece_folder_names_its_added_tokens(tmp_path):
    """A slow-tokenizer folder as transformers v4 saved it: tokenizer.model (trained here
    by the sentencepiece library) and added_tokens.json, no tokenizer.json."""
    spm = pytest.importorskip("sentencepiece")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(" ".join(WORDS[i : i + 7]) for i in range(0, 110)) + "\n")
    prefix = tmp_path / "sp"
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(prefix), vocab_size=100, model_type="unigram"
    )
    sp = spm.SentencePieceProcessor(model_file=str(prefix) + ".model")
    n = sp.get_piece_size()
    ckpt = tmp_path / "ckpt"
    model = _pretrained(n + len(SIDS))
    with torch.no_grad():  # mean-initialized: the gate names each untrained token
        w = model.get_input_embeddings().weight
        w[n:] = w[:n].mean(dim=0)
    model.save_pretrained(ckpt)
    shutil.copy(str(prefix) + ".model", ckpt / "tokenizer.model")
    (ckpt / "added_tokens.json").write_text(json.dumps({t: n + i for i, t in enumerate(SIDS)}))
    rep = measure_checkpoint(ckpt, AnalyzeOptions(n_permutations=0))
    assert rep.new_token_source == "tokenizer" and rep.n_new_tokens == len(SIDS)
    assert rep.level_names == ["a", "b"]  # from the names added_tokens.json gives
    res = run("check", ckpt, "--permutations", 0)
    assert res.exit_code == 1 and "<id " not in res.stdout and "<a_0>, <a_1>" in res.stdout
    from geodiag.io.vocabulary.tokenizer import sentencepiece_pieces

    pieces = sentencepiece_pieces(ckpt / "tokenizer.model")  # against the library's own
    assert [pieces[i] for i in range(n)] == [sp.id_to_piece(i) for i in range(n)]
    (ckpt / "added_tokens.json").unlink()
    line = one_line_exit_2(run("check", ckpt))
    assert "no added tokens in tokenizer.model" in line


# ---- 3, 4. DCP, formats not read yet, the Hub cache, LFS pointers --------------------------------


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return _extended(tmp_path_factory.mktemp("saved") / "m", trained=True)


def test_one_process_dcp_folders_are_read_as_their_source(saved, tmp_path):
    """torch.distributed.checkpoint without a process group (one chunk per tensor), bare
    and as the Trainer's pytorch_model_fsdp_0/: the figures of the safetensors it holds
    (the 2-rank FSDP2 layouts: tests/geodiag/io/formats/test_dcp.py)."""
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import load_file

    state = {"model": load_file(str(saved / "model.safetensors"))}
    bare, trainer = tmp_path / "dcp", tmp_path / "checkpoint-500"
    dcp.save(state, checkpoint_id=str(bare))
    dcp.save(state, checkpoint_id=str(trainer / "pytorch_model_fsdp_0"))
    for folder in (bare, trainer):
        for name in ("config.json", "tokenizer.json"):
            shutil.copy(saved / name, folder / name)
    want = run("metrics", saved, "--permutations", 0)
    for folder in (bare, trainer):
        res = run("metrics", folder, "--permutations", 0)
        assert res.exit_code == want.exit_code == 0, res.output
        # all but the first line, which names the folder and its store
        assert res.stdout.split("\n", 1)[1] == want.stdout.split("\n", 1)[1]


def test_deepspeed_zero_folder_names_zero_to_fp32(saved, tmp_path):
    """DeepSpeed's documented layout: global_stepN/ with per-rank *_states.pt, `latest`,
    and the zero_to_fp32.py script it copies beside them."""
    ckpt = tmp_path / "checkpoint-10"
    shards = ckpt / "global_step10"
    shards.mkdir(parents=True)
    torch.save({"module": None}, shards / "mp_rank_00_model_states.pt")
    torch.save({}, shards / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    (ckpt / "latest").write_text("global_step10")
    (ckpt / "zero_to_fp32.py").write_text("# DeepSpeed's script\n")
    shutil.copy(saved / "config.json", ckpt / "config.json")
    line = one_line_exit_2(run("check", ckpt))
    # geodiag.io.formats.zero reads real ZeRO files (test_zero.py); these hold no partitions
    assert "zero_pp_rank_0_mp_rank_00_optim_states.pt" in line and "optimizer_state_dict" in line
    assert str(ckpt / "zero_to_fp32.py") in line and "--safe_serialization" in line


def test_hub_cache_root_is_read_through_refs_main(saved, tmp_path):
    """The layout huggingface_hub's cache writes: blobs, snapshots/<commit>/ of symlinks
    into them, refs/main naming the commit."""
    root = tmp_path / "hub" / "models--org--sids"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(commit)
    snap = root / "snapshots" / commit
    snap.mkdir(parents=True)
    (root / "blobs").mkdir()
    for f in saved.iterdir():
        blob = root / "blobs" / f"blob-{f.name}"
        shutil.copy(f, blob)
        (snap / f.name).symlink_to(Path("../../blobs") / blob.name)
    res = run("check", root, "--permutations", 0, "--json")
    direct = run("check", saved, "--permutations", 0, "--json")
    assert res.exit_code == direct.exit_code == 0, res.output
    ours, theirs = json.loads(res.stdout), json.loads(direct.stdout)
    strip = [{k: v for k, v in c.items()} for c in theirs["results"][0]["checks"]]
    assert ours["results"][0]["checks"] == strip
    rep = measure_checkpoint(root, AnalyzeOptions(n_permutations=0))
    assert any("refs/main" in n for n in rep.notes)
    (root / "refs" / "main").write_text("f" * 40)
    line = one_line_exit_2(run("check", root))
    assert "refs/main" in line and "not in" in line


def test_git_lfs_pointer_is_named_as_such(saved, tmp_path):
    """What `git clone` of a Hub repository gives without git-lfs."""
    clone = tmp_path / "clone"
    shutil.copytree(saved, clone)
    blob = (clone / "model.safetensors").read_bytes()
    import hashlib

    (clone / "model.safetensors").write_text(
        "version https://git-lfs.github.com/spec/v1\n"
        f"oid sha256:{hashlib.sha256(blob).hexdigest()}\nsize {len(blob)}\n"
    )
    line = one_line_exit_2(run("check", clone))
    assert "Git LFS pointer" in line and "git lfs pull" in line and "header claims" not in line
    line = one_line_exit_2(run("metrics", clone / "model.safetensors"))
    assert "Git LFS pointer" in line


def test_reserved_slots_get_their_own_remedy(tmp_path):
    """Llama-3 style: the base reserves special tokens whose rows pretraining never
    trained; a user who reuses them (renamed or not) measures their rows by range."""
    tok = _tokenizer()
    n_old = len(tok)
    reserved = [f"<|reserved_special_token_{i}|>" for i in range(24)]
    tok.add_special_tokens({"additional_special_tokens": reserved})
    model = _pretrained(n_old)
    model.resize_token_embeddings(len(tok), mean_resizing=False)
    with torch.no_grad():  # one small value everywhere, as the base left them
        model.get_input_embeddings().weight[n_old:] = 1e-3
    ckpt = save(model, tmp_path / "llama3", tok)
    res = run("check", ckpt, "--new-tokens", f"{n_old}:{len(tok)}", "--permutations", 0)
    assert res.exit_code == 1, res.output
    verdict = next(line for line in res.stdout.splitlines() if "verdict:" in line)
    assert "reserved slots" in verdict and "no resize happened" in verdict
    assert "mean_resizing" not in verdict and "Unsloth" not in verdict
