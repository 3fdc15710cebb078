"""One diagnosis per planted geometry (docs/gate.md's table), and a sentence for every enabled check."""

from __future__ import annotations

import pytest

from geodiag.analysis.checkpoint import measure_checkpoint
from geodiag.analysis.options import AnalyzeOptions
from geodiag.gate.checks import GateConfig, run_gate
from geodiag.gate.verdict import GTI, verdict

OPTS = AnalyzeOptions(n_permutations=50, neighbors_max=0)


def diagnose(path, cfg=GateConfig()):
    report = measure_checkpoint(path, OPTS)
    return verdict(report, run_gate(report, cfg))


@pytest.mark.parametrize(
    ("kind", "status", "phrase"),
    [
        ("mean", "fail", "are the same vector: mean initialization"),
        ("mean-noise", "fail", "lie within"),
        ("line", "fail", "on a line"),
        ("random", "warn", "carries no structure"),
        ("grounded", "pass", "healthy"),
    ],
)
def test_diagnosis_per_planted_geometry(make_ckpt, kind, status, phrase):
    v = diagnose(make_ckpt(kind))
    assert v.status == status
    assert phrase in v.sentence.lower() or phrase in v.sentence
    if status != "pass":
        assert GTI in v.sentence  # a remedy, in the user's terms


def test_mean_noise_names_its_scale(make_ckpt):
    v = diagnose(make_ckpt("mean-noise"))
    assert (
        "of one point" in v.sentence
        and "mean initialization, perhaps with small noise" in v.sentence
    )


def test_every_enabled_check_gets_a_finding_and_the_card_the_remedy_once(make_ckpt):
    for kind in ("mean", "mean-noise", "line", "random"):
        v = diagnose(make_ckpt(kind))
        names = [c.name for c in v.checks]
        assert "effective_rank" not in names  # disabled by default: not shown
        assert {"effective_rank_ratio", "spread_relative", "mean_pairwise_cosine"} <= set(names)
        for c in v.checks:
            assert c.sentence and c.sentence.endswith(".")
            assert GTI not in c.sentence and "give each token its own" not in c.sentence, (kind, c)
        card = v.sentence + " ".join(c.sentence for c in v.checks)
        assert card.count(GTI) == 1, (kind, card)


def test_without_codebooks_the_verdict_says_structure_was_not_measured(make_ckpt):
    v = diagnose(make_ckpt("grounded", with_codebooks=False))
    assert v.status == "pass" and "not measured" in v.sentence


def test_min_rsa_failure_is_explained(make_ckpt):
    v = diagnose(make_ckpt("random"), GateConfig(min_rsa=0.5))
    assert v.status == "fail" and "do not reproduce the codebook's structure" in v.sentence
    assert any(c.name.startswith("rsa[") and "structure is lost" in c.sentence for c in v.checks)


def test_a_significant_but_negligible_rsa_is_a_faint_trace_not_the_structure_kept(make_ckpt):
    """'Keeps the codebook's structure' was said of a significant RSA of 0.014 (issue 50).
    With level b's RSA planted at 0.05 (p 0.01) and c's at 0.3 beside a's, b is a faint
    trace (under Cohen's small effect, metrics.rsa.SMALL_EFFECT) and only a, c keep it."""
    import dataclasses

    from geodiag.gate.verdict import check_sentence
    from geodiag.metrics.rsa import SMALL_EFFECT

    report = measure_checkpoint(make_ckpt("grounded"), OPTS)
    m = report.matrices[0]
    planted = {"b": (0.05, 0.01), "c": (0.3, 0.01)}
    for lv in m.levels:
        if lv.name in planted:
            r, p = planted[lv.name]
            lv.rsa = dataclasses.replace(lv.rsa, spearman=r, p_value=p)
    assert 0.05 < SMALL_EFFECT <= 0.3
    res = run_gate(report, GateConfig())
    v = verdict(report, res)
    by_level = {c.level: c for c in res.checks if c.name.startswith("rsa")}
    assert by_level["b"].status == "pass"  # the gate does not change: only the words
    assert "faint trace" in check_sentence(by_level["b"], m)
    assert "keeps the codebook's structure" in check_sentence(by_level["c"], m)
    assert "every level keeps" not in v.sentence
    assert "level(s) b only a faint trace" in v.sentence, v.sentence
