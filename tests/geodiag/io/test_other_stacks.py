"""Checkpoints from other stacks: untied heads initialized like Unsloth / LLaMA-Factory,
a whole table of new tokens (TIGER-style), and verdicts in each stack's own terms."""

from __future__ import annotations

import json

import numpy as np
import pytest
from geodiag_fixtures import BASE_VOCAB, DIM, base_rows, planted_new_rows, write_checkpoint
from typer.testing import CliRunner

from geodiag.analysis.checkpoint import measure_checkpoint
from geodiag.analysis.options import AnalyzeOptions
from geodiag.cli import app
from geodiag.gate.checks import GateConfig, run_gate
from geodiag.gate.verdict import GTI, fingerprint, verdict
from geodiag.io.formats.safetensors import save_file

N_NEW = 24
OPTS = AnalyzeOptions(n_permutations=20, neighbors_max=0)


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def diagnose(path, opts=OPTS):
    report = measure_checkpoint(path, opts)
    return report, verdict(report, run_gate(report, GateConfig()))


def _untied(tmp_path, name, new_in, new_out, **kw):
    rng = np.random.default_rng(5)
    head = np.concatenate([rng.normal(size=(BASE_VOCAB, DIM)) * 0.1, new_out])
    return write_checkpoint(tmp_path / name, new_in, untied_head=head, **kw)


# ---- untied heads, Unsloth / LLaMA-Factory style -----------------------------------------


def test_unsloth_mean_rows_fail_on_both_matrices_and_say_which(tmp_path):
    """Unsloth's add_new_tokens(method="mean"): every new row of embed_tokens and of lm_head
    is that matrix's mean vector."""
    base = base_rows()
    rng = np.random.default_rng(5)
    head_base = rng.normal(size=(BASE_VOCAB, DIM)) * 0.1
    new_in = np.tile(base.mean(axis=0), (N_NEW, 1))
    new_out = np.tile(head_base.mean(axis=0), (N_NEW, 1))
    head = np.concatenate([head_base, new_out])
    ckpt = write_checkpoint(tmp_path / "unsloth", new_in, untied_head=head, provenance={"x": 1})
    (ckpt / "config.json").write_text(
        json.dumps(
            {"hidden_size": DIM, "tie_word_embeddings": False, "unsloth_version": "2025.6.1"}
        )
    )
    res = run("check", ckpt, "--json", "--permutations", 10)
    assert res.exit_code == 1
    checks = json.loads(res.stdout)["results"][0]["checks"]
    failed = {(c["matrix"], c["name"]) for c in checks if c["status"] == "fail"}
    for role in ("input", "output"):
        assert {
            (role, "effective_rank_ratio"),
            (role, "spread_relative"),
            (role, "mean_pairwise_cosine"),
        } <= failed
    text = run("check", ckpt, "--permutations", 10).stdout
    assert "input embedding model.embed_tokens.weight:" in text
    assert "output head lm_head.weight:" in text
    # The verdict names each matrix, Unsloth's option and its alternative, gti as one option.
    report, v = diagnose(ckpt)
    assert "Input embedding (model.embed_tokens.weight): All 24 new tokens" in v.sentence
    assert "Output head (lm_head.weight): All 24 new tokens" in v.sentence
    assert 'method="interpolation"' in v.sentence and GTI in v.sentence
    assert report.stack["name"] == "unsloth"


def test_llamafactory_noise_init_is_fingerprinted_on_both_matrices(tmp_path):
    """LLaMA-Factory's noise_init: mean + N(0, 1/sqrt(d)) std per coordinate, on both
    matrices. The RMS spread around the sample mean is then ~sqrt((n-1)/n) = 0.98 in
    embedding units, with a relative standard error of ~sqrt(1 / (2 (n-1) d)) = 0.026:
    the 0.1 window below is about 4 standard errors."""
    rng = np.random.default_rng(11)
    base = base_rows()
    head_base = np.random.default_rng(5).normal(size=(BASE_VOCAB, DIM)) * 0.1
    noise = lambda: rng.normal(scale=1 / np.sqrt(DIM), size=(N_NEW, DIM))  # noqa: E731
    new_in, new_out = base.mean(axis=0) + noise(), head_base.mean(axis=0) + noise()
    ckpt = _untied(tmp_path, "llamafactory", new_in, new_out)
    (ckpt / "semantic_ids.json").unlink()  # levels then come from the token names
    (ckpt / "trainer_log.jsonl").write_text('{"current_steps": 10}\n')
    (ckpt / "training_args.yaml").write_text(
        "resize_vocab: true\ninit_special_tokens: noise_init\n"
    )
    report, v = diagnose(ckpt)
    assert report.stack == {
        "name": "llamafactory",
        "evidence": "trainer_log.jsonl",
        "init_special_tokens": "noise_init",
        "resize_vocab": "true",
    }
    assert [m.role for m in report.matrices] == ["input", "output"]
    for m in report.matrices:
        expected = np.sqrt((N_NEW - 1) / N_NEW)
        assert abs(m.new.spread - expected) < 0.1
        assert fingerprint(m) == "unit-noise"
    # At this vocabulary's scale (spread ~0.7) the noise is no collapse: the gate passes the
    # shape checks and the verdict says the rows carry no structure, in LLaMA-Factory's terms.
    assert "noise_init" in v.sentence and "desc_init" in v.sentence


# ---- a whole table of new tokens ------------------------------------------------------


def _tiger(tmp_path, table: np.ndarray):
    """A recommender with a separate nn.Embedding for the code tokens (no original vocab)."""
    root = tmp_path / "tiger"
    root.mkdir(parents=True)
    tensors = {
        "model.embed_tokens.weight": base_rows().astype(np.float32),
        "sid_embedding.weight": table.astype(np.float32),
        "lm_head.weight": base_rows(1).astype(np.float32),
    }
    save_file(tensors, root / "model.safetensors")
    (root / "config.json").write_text(
        json.dumps({"hidden_size": DIM, "tie_word_embeddings": False})
    )
    return root


def test_all_rows_new_hand_computed(tmp_path):
    """Rows 2 e_i (i < 4): mean pairwise cosine 0; centered, 2 (I - J/4) has singular values
    2, 2, 2, 0, so the centered effective rank is exactly 3 (ratio 3/4)."""
    table = np.zeros((4, DIM))
    table[np.arange(4), np.arange(4)] = 2.0
    root = _tiger(tmp_path, table)
    res = run("metrics", root, "--tensor", "sid_embedding.weight", "--all-rows-new", "--json")
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    assert rep["new_token_source"] == "all rows" and rep["base_vocab_size"] == 0
    (m,) = rep["matrices"]  # the LM's head is not this table's business
    assert m["tensor"] == "sid_embedding.weight" and m["n_new"] == 4
    assert m["new"]["mean_pairwise_cosine"] == pytest.approx(0.0, abs=1e-15)
    assert m["new"]["centered"]["effective_rank"] == pytest.approx(3.0, rel=1e-12)
    assert m["new"]["centered"]["singular_values"] == pytest.approx([2, 2, 2, 0], abs=1e-12)
    # Vocabulary-relative figures: strict null with the reason beside them.
    assert m["reference"] is None and m["new"]["spread_relative"] is None
    assert "no original vocabulary" in m["reference_undefined_reason"]
    assert m["neighbors"] == []
    assert any("spread ratio and nearest original tokens undefined" in n for n in rep["notes"])
    text = run("metrics", root, "--tensor", "sid_embedding.weight", "--all-rows-new").stdout
    assert "no original vocabulary" in text and "undefined" in text


def test_all_rows_new_gate_uses_only_defined_checks(tmp_path):
    collapsed = _tiger(tmp_path, np.tile(np.linspace(-1, 1, DIM), (16, 1)))
    args = ["--tensor", "sid_embedding.weight", "--all-rows-new", "--permutations", 10]
    res = run("check", collapsed, *args)
    assert res.exit_code == 1
    assert "[skip] spread_relative undefined: every row of the tensor is a new token" in res.stdout
    assert (
        "[fail] effective_rank_ratio" in res.stdout and "[fail] mean_pairwise_cosine" in res.stdout
    )
    assert "Skipped as undefined: norm_ratio, spread_relative." in res.stdout
    rng = np.random.default_rng(0)
    healthy = _tiger(tmp_path / "h", rng.normal(size=(16, DIM)))
    res = run("check", healthy, *args, "--json")
    assert res.exit_code == 0
    checks = json.loads(res.stdout)["results"][0]["checks"]
    assert {c["name"]: c["status"] for c in checks}["spread_relative"] == "skip"
    # Flags that contradict each other are a usage error.
    res = run("check", healthy, *args, "--new-tokens", "0:4")
    assert res.exit_code == 2 and "--all-rows-new" in res.stderr


def test_all_rows_new_report_renders(tmp_path):
    rng = np.random.default_rng(0)
    root = _tiger(tmp_path, rng.normal(size=(16, DIM)))
    out = tmp_path / "r.html"
    res = run(
        "report",
        root,
        "--tensor",
        "sid_embedding.weight",
        "--all-rows-new",
        "-o",
        out,
        "--permutations",
        10,
    )
    assert res.exit_code == 0, res.output
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["checkpoints"][0]["report"]["matrices"][0]["reference"] is None
    assert "spread_relative" in data["checkpoints"][0]["verdict"]["sentence"]


# ---- verdicts in the stack's own terms ------------------------------------------------


def test_transformers_mean_resizing_names_the_option(tmp_path):
    ckpt = write_checkpoint(
        tmp_path / "hf", planted_new_rows("mean-noise", base_rows()), with_sidecar=False
    )
    (ckpt / "trainer_state.json").write_text("{}")
    report, v = diagnose(ckpt)
    assert report.stack["name"] == "transformers"
    assert fingerprint(report.matrices[0]) == "near-identical"
    assert "mean_resizing=True" in v.sentence and "mean_resizing=False" in v.sentence
    assert GTI in v.sentence


def test_unknown_stack_names_the_likely_producer_by_the_numbers(tmp_path):
    ckpt = write_checkpoint(
        tmp_path / "bare", planted_new_rows("mean", base_rows()), with_sidecar=False
    )
    report, v = diagnose(ckpt)
    assert report.stack["name"] == "unknown"
    assert "likely an exact mean init" in v.sentence and "add_new_tokens" in v.sentence
    assert "desc_init" in v.sentence and GTI in v.sentence


def test_gti_init_without_structure_says_ground_longer_with_the_numbers(tmp_path):
    prov = {
        "stage": "init",
        "init_strategy": "gti",
        "step": 40,
        "seed": 0,
        "data": "movielens-100k",
        "sids_provenance": {"encoder": "lm", "strategy": "rqvae"},
    }
    ckpt = write_checkpoint(
        tmp_path / "gti", planted_new_rows("random", base_rows()), provenance=prov
    )
    # Enough permutations that no level of these random rows looks significant by chance.
    report, v = diagnose(ckpt, AnalyzeOptions(n_permutations=1000, neighbors_max=0))
    assert v.status == "warn"
    assert "grounded for 40 steps" in v.sentence and "8,000 steps x 128" in v.sentence
    assert (
        "check that the item descriptions" in v.sentence
        and "lm embeddings of movielens-100k" in v.sentence
    )


def test_gti_sft_keeps_the_init_provenance_in_the_advice(tmp_path):
    init = {"stage": "init", "init_strategy": "mean", "init_signature": "identical", "step": 0}
    prov = {"stage": "sft", "step": 30, "init_strategy": "mean", "init": init, "sft_tasks": ["seq"]}
    ckpt = write_checkpoint(
        tmp_path / "sft", planted_new_rows("mean", base_rows()), provenance=prov
    )
    _, v = diagnose(ckpt)
    assert "the sidecar says `gti init --strategy mean`" in v.sentence


def test_a_sidecar_older_than_the_signature_is_read_by_the_format_it_had(tmp_path):
    """Before ``init_signature`` a gti sidecar named only its strategy, from a closed set:
    read by that format, it says what it always said; a strategy outside that set (one
    added since, written before the field) leaves the words to the rows' statistics."""
    rows = planted_new_rows("mean", base_rows())
    prov = {"stage": "init", "init_strategy": "mean", "step": 0, "seed": 0}
    _, v = diagnose(write_checkpoint(tmp_path / "old", rows, provenance=prov))
    assert v.cause == "the sidecar says `gti init --strategy mean`"
    prov = {**prov, "init_strategy": "subword"}
    _, v = diagnose(write_checkpoint(tmp_path / "between", rows, provenance=prov))
    assert v.status == "fail" and "the sidecar says" not in v.sentence
    assert "likely an exact mean init" in v.cause
    assert "`--strategy description-mean`" in v.remedy


def test_provenance_line_is_readable(tmp_path):
    prov = {
        "stage": "sft",
        "step": 30,
        "init_strategy": "gti",
        "sft_tasks": ["seq", "align"],
        "init": {"stage": "init", "step": 250, "sids_provenance": {"encoder": "lm"}},
    }
    ckpt = write_checkpoint(
        tmp_path / "p", planted_new_rows("random", base_rows()), provenance=prov
    )
    text = run("metrics", ckpt, "--permutations", 10).stdout
    lines = text.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith("provenance"))
    assert lines[i] == "provenance   stage sft, step 30, init_strategy gti, sft_tasks [seq, align]"
    assert lines[i + 1 : i + 5] == [
        "             init:",
        "               stage init, step 250",
        "               sids:",
        "                 encoder lm",
    ]
    assert "{" not in text.split("\n\n")[0]  # no raw dicts in the header


def test_report_renders_nested_provenance_readably(tmp_path):
    prov = {
        "stage": "sft",
        "step": 30,
        "init_strategy": "gti",
        "init": {"stage": "init", "step": 250, "sids_provenance": {"encoder": "lm"}},
    }
    ckpt = write_checkpoint(
        tmp_path / "p", planted_new_rows("random", base_rows()), provenance=prov
    )
    out = tmp_path / "r.html"
    assert run("report", ckpt, "-o", out, "--permutations", 10).exit_code == 0
    html = out.read_text()
    assert "stage init, step 250" in html and "encoder lm" in html
    assert "{&#39;stage&#39;" not in html and "{'stage'" not in html


def test_gti_init_with_some_levels_unstructured_gets_the_gti_remedy_not_a_random_init_guess(
    tmp_path,
):
    from geodiag_fixtures import LEVELS

    prov = {
        "stage": "init",
        "init_strategy": "gti",
        "step": 74,
        "seed": 0,
        "data": "movielens-100k",
        "sids_provenance": {"encoder": "lm"},
    }
    n_first = LEVELS[0][1]
    rows = planted_new_rows("random", base_rows())
    rows[:n_first] = planted_new_rows("grounded", base_rows())[:n_first]  # only level 1 grounded
    ckpt = write_checkpoint(tmp_path / "gti", rows, provenance=prov)
    report, v = diagnose(ckpt, AnalyzeOptions(n_permutations=1000, neighbors_max=0))
    gate = run_gate(report, GateConfig())
    warned = [c for c in gate.checks if c.status == "warn"]
    assert warned and all(c.name.startswith("rsa[") for c in warned)
    assert f"rsa[{LEVELS[0][0]}]" not in {c.name for c in warned}
    for c in warned:  # the gate names the level and leaves the remedy to the verdict
        assert c.message.startswith(f"{c.name} ") and "random init" not in c.message
    assert "level(s) a keep it" in v.sentence and "grounded for 74 steps" in v.sentence
