"""The probe's figures on models whose answer is known: a mean-init checkpoint (every new
row identical) scores exactly the tie-break baseline, item by item, and its SID -> text
likelihood cannot tell its own SID from another; the same checkpoint with output rows
planted so that greedy decoding must emit each item's SID scores exact match 1."""

from __future__ import annotations

from planted_rows import plant
from transformers import AutoModelForCausalLM, AutoTokenizer

from gti.probe.config import ProbeConfig
from gti.probe.measure import probe_model
from gti.probe.source import resolve_source


def _load(ckpt):
    model = AutoModelForCausalLM.from_pretrained(ckpt, local_files_only=True).eval()
    return model, AutoTokenizer.from_pretrained(ckpt, local_files_only=True)


def test_mean_init_scores_the_tie_break_baseline(mean_ckpt):
    model, tok = _load(mean_ckpt)
    src = resolve_source(ProbeConfig(checkpoint=mean_ckpt))
    r = probe_model(model, tok, src, n_resamples=200)
    assert r.n_items == 12 and not r.held_out  # gti init grounds every item: a sample, said so
    assert r.notes == [src.how] and "no held-out set" in src.how
    assert r.model == r.tie_break.decoding  # hits per level and exact, intervals and all
    assert r.tie_break.answer == ["<a_0>", "<b_0>", "<c_0>"]  # the lowest ids, level by level
    assert r.model.exact_match.hits == 1  # m0 is <a_0><b_0><c_0>
    lik = r.likelihood
    assert lik.true_mean == lik.shuffled_mean and lik.difference.estimate == 0
    assert lik.true_wins.hits == 0 and lik.p_value == 1.0


def test_planted_output_rows_score_exact_match_one(mean_ckpt):
    model, tok = _load(mean_ckpt)
    src = resolve_source(ProbeConfig(checkpoint=mean_ckpt))
    plant(model, tok, src)
    r = probe_model(model, tok, src, n_resamples=200)
    assert r.model.exact_match.hits == r.n_items == 12
    assert [lv.accuracy.estimate for lv in r.model.levels] == [1.0, 1.0, 1.0]
    assert r.model.exact_match.low > r.tie_break.decoding.exact_match.high
    assert r.model.exact_match.low > r.most_frequent.decoding.exact_match.high
