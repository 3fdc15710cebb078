"""``gti init`` end to end on the tiny world: the exact files, and geodiag's verdict."""

from __future__ import annotations

import json

import pytest
import torch
import typer
from transformers import AutoModelForCausalLM, AutoTokenizer
from typer.testing import CliRunner

from geodiag.cli import app as geodiag_app
from geodiag.io.checkpoint import open_checkpoint
from geodiag.io.vocabulary import sidecar
from gti.init import SIGNATURE
from gti.init.cli import init
from gti.init.config import ROW_STRATEGIES

runner = CliRunner()
app = typer.Typer()
app.command("init")(init)
app.command("noop")(lambda: None)  # two commands: `init` is then a subcommand, as in gti

# What save_pretrained writes for a tiny Llama + fast tokenizer (transformers 4.x / 5.x).
HF_FILES = {
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
}
OWN_FILES = {"semantic_ids.json", "codebooks.safetensors", "init_config.json"}


def gti_init(world, out, *args):
    res = runner.invoke(
        app, ["init", "--sids", str(world.sids_dir), "-o", str(out), *map(str, args)]
    )
    return res


@pytest.mark.parametrize("strategy", [*ROW_STRATEGIES, "gti"])
def test_writes_a_contract_checkpoint(world, strategy):
    out = world.root / "runs" / strategy
    res = gti_init(world, out, "--strategy", strategy, "--preset", "tiny", "--no-progress")
    assert res.exit_code == 0, res.output
    files = {p.name for p in out.iterdir()}
    expected = OWN_FILES | ({"train_log.jsonl"} if strategy == "gti" else set())
    assert expected <= files and {"config.json", "model.safetensors", "tokenizer.json"} <= files
    assert files - expected <= HF_FILES, files
    assert sorted(p.name for p in out.parent.iterdir()) == [strategy]  # no staging or .partial left

    sids = sidecar.load(out)
    assert sids.has_token_ids and sids.base_vocab_size is not None
    assert sids.items == world.sids.items
    prov = sids.provenance
    assert prov["stage"] == "init" and prov["init_strategy"] == strategy and prov["seed"] == 0
    assert prov["source_model"] == str(world.model_dir)
    assert prov["step"] == (4 if strategy == "gti" else 0)
    assert prov["start_from"] == ("mean" if strategy == "gti" else None)
    assert prov["init_signature"] == ("trained" if strategy == "gti" else SIGNATURE[strategy])
    assert prov.get("start_signature") == ("identical" if strategy == "gti" else None)
    assert (out / "codebooks.safetensors").read_bytes() == (
        world.sids_dir / "codebooks.safetensors"
    ).read_bytes()

    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    ids = [t for lv in sids.levels for t in lv.token_ids]
    assert tok.convert_ids_to_tokens(ids) == sids.token_strings()
    assert model.get_input_embeddings().weight.shape[0] == max(ids) + 1
    if strategy == "gti":
        log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
        assert [e["step"] for e in log] == [1, 2, 3, 4] and all(e["loss"] > 0 for e in log)


def geodiag_check(ckpt):
    return runner.invoke(geodiag_app, ["check", str(ckpt), "--permutations", "50", "--json"])


def test_geodiag_fails_mean_inits_and_passes_random(world):
    verdict = {}
    for strategy in ("mean", "mean-noise", "random"):
        out = world.root / strategy
        assert gti_init(world, out, "--strategy", strategy).exit_code == 0
        res = geodiag_check(out)
        assert res.exit_code in (0, 1), res.output
        verdict[strategy] = res.exit_code
    assert verdict == {"mean": 1, "mean-noise": 1, "random": 0}


def test_the_draws_statistics_agree_with_the_signature_the_sidecar_states(world):
    """Where the rows' statistics can tell a draw (geodiag.gate.signature.fingerprint), they
    tell the one gti's sidecar states; the draws at the vocabulary's scale show none. So the
    sidecar's word and geodiag's own reading of the rows are two sources that agree."""
    from geodiag.analysis.checkpoint import measure_checkpoint
    from geodiag.analysis.options import AnalyzeOptions
    from geodiag.gate.signature import fingerprint

    expected = {
        "mean": "identical",
        "mean-noise": "near-identical",
        "llamafactory-noise": "unit-noise",
        "random": None,
        "full-covariance": None,
    }
    for strategy, seen in expected.items():
        out = world.root / f"sig-{strategy}"
        assert gti_init(world, out, "--strategy", strategy).exit_code == 0
        assert sidecar.load(out).provenance["init_signature"] == SIGNATURE[strategy]
        report = measure_checkpoint(out, AnalyzeOptions(n_permutations=10, neighbors_max=0))
        assert [fingerprint(m) for m in report.matrices] == [seen], strategy


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--strategy", "median"], "--strategy"),
        (["--strategy", "gti", "--start-from", "gti"], "--start-from"),
        (["--strategy", "gti", "--steps", "0"], "--steps"),
        (["--preset", "huge"], "--preset"),
        (["--norm-correct", "mean"], "--norm-correct"),
        (["--objective", "kl"], "--objective"),
        (["--distill-target", "attention"], "--distill-target"),
        (["--objective", "distill", "--distill-layer", "0"], "--distill-layer"),
        (["--objective", "distill", "--distill-layer", "9"], "--distill-layer"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(world, args, flag):
    res = gti_init(world, world.root / "bad", *args)
    assert res.exit_code == 2 and flag in res.output
    assert not (world.root / "bad").exists()


def test_missing_sids_folder_exits_2(world, tmp_path):
    res = runner.invoke(app, ["init", "--sids", str(tmp_path / "nope"), "-o", str(tmp_path / "o")])
    assert res.exit_code == 2 and "not found" in res.output


def test_padded_vocabulary_keeps_the_new_ids_explicit(world):
    """--pad-vocab-to-multiple-of 64 (with --gradient-checkpointing, recorded): the embedding grows to a multiple of 64 rows, the SID
    ids stay the tokenizer's, the padding rows stay zero through init and grounding (bit for
    bit), and geodiag judges exactly the SID rows."""
    out = world.root / "padded"
    args = ("--strategy", "gti", "--preset", "tiny", "--no-progress")
    res = gti_init(world, out, *args, "--pad-vocab-to-multiple-of", 64, "--gradient-checkpointing")
    assert res.exit_code == 0, res.output

    tok = AutoTokenizer.from_pretrained(out)
    weight = AutoModelForCausalLM.from_pretrained(out).get_input_embeddings().weight.detach()
    assert weight.shape[0] % 64 == 0 and weight.shape[0] > len(tok)
    sids = sidecar.load(out)
    strings = world.sids.token_strings()
    ids = [i for lv in sids.levels for i in lv.token_ids]
    assert ids == tok.convert_tokens_to_ids(strings)
    assert max(ids) == len(tok) - 1  # the padding rows are past every token
    assert bool((weight[len(tok) :] == 0).all())  # zero as extended, untouched since
    base = AutoModelForCausalLM.from_pretrained(world.model_dir).get_input_embeddings().weight
    assert torch.equal(weight[: sids.base_vocab_size], base.detach())
    run = json.loads((out / "init_config.json").read_text())
    assert run["pad_vocab_to_multiple_of"] == 64 and run["grounding"]["gradient_checkpointing"]

    # check's verdict, through the CLI, is on the same rows its one assembly resolves
    res = geodiag_check(out)
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["results"][0]["checks"]
    ckpt = open_checkpoint(out)
    assert ckpt.new.ids.tolist() == ids
    assert ckpt.padding_ids().tolist() == list(range(len(tok), weight.shape[0]))
    assert ckpt.provenance["base_embedding_rows"] == sids.base_vocab_size
    # the padding rows are a note, and the sidecar's base row count rules out that the
    # new tokens sit on padding rows the base already had (no --base needed)
    text = runner.invoke(geodiag_app, ["check", str(out), "--permutations", "50"]).output
    assert "padding rows past the tokenizer" in text and "--base BASE" not in text
