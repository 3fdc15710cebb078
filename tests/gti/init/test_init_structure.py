"""The structure curve: the held-out accuracy probe against a plain reference, planted
answers, chance, and the geometry figures against geodiag's own functions."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from initworld import TEXTS, make_model, make_sids, make_tokenizer
from tinyworld import CODES, LEVELS

from geodiag.metrics.geometry import summarize
from geodiag.metrics.rsa import rsa
from gti.init import InitContext
from gti.init.grounding import NewRows, freeze
from gti.init.run import apply_row_init
from gti.init.structure import (
    HELD_OUT_TEXT_TO_SID,
    ProbeItems,
    StructureProbe,
    reference_rows,
    structure_entry,
)
from gti.prompts import TEXT_TO_SID, render
from gti.vocab import extend_vocabulary

BOOKS = {
    name: np.random.default_rng(i).normal(size=(size, 5)) for i, (name, size) in enumerate(LEVELS)
}


def setup(chat: bool, codes=CODES, tied: bool = True):
    tok = make_tokenizer(chat)
    model = make_model(tok, tied=tied)
    ext = extend_vocabulary(model, tok, make_sids())
    apply_row_init(model, ext, "random", torch.Generator().manual_seed(0), InitContext())
    freeze(model)
    rows = NewRows(model, ext)
    items = ProbeItems(
        texts=list(TEXTS),
        codes=np.array(codes),
        level_names=[n for n, _ in LEVELS],
        level_sizes=[s for _, s in LEVELS],
        codebooks=BOOKS,
    )
    probe = StructureProbe(
        model, tok, rows, items, base_vocab_size=ext.base_vocab_size, permutations=50, chunk=5
    )
    return tok, model, ext, rows, probe


def reference_greedy(tok, model, rows, text: str) -> list[int]:
    """One item, no cache, no padding: the full model with the rows written in,
    greedy over each level's tokens in turn."""
    rows.write_back(model)
    ex = render(tok, HELD_OUT_TEXT_TO_SID.format(text=text), "x", direction=0)
    ids = list(ex.input_ids[: ex.answer_start])
    offsets = np.cumsum([0, *(s for _, s in LEVELS)])
    codes = []
    with torch.no_grad():
        for level in range(len(LEVELS)):
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1]  # (V,)
            level_ids = rows.ids[offsets[level] : offsets[level + 1]]
            code = int(logits[level_ids].argmax())
            codes.append(code)
            ids.append(int(level_ids[code]))
    return codes


@pytest.mark.parametrize("chat", [False, True])
def test_probe_predictions_equal_plain_greedy_reference(chat):
    tok, model, ext, rows, probe = setup(chat)
    held_out = "for this catalog entry"  # words of the held-out template only
    assert all(held_out in tok.decode(p).lower() for p in probe.prompts)
    got = probe.predict()  # (n, L), sample order; padded, chunked, cached
    want = np.array([reference_greedy(tok, model, rows, TEXTS[i]) for i in probe.sample])
    np.testing.assert_array_equal(got, want)


def test_planted_targets_give_known_accuracy():
    tok, model, ext, rows, probe = setup(True)
    pred = probe.predict()
    probe.targets = torch.from_numpy(pred.copy())  # the answer is what the rows predict
    assert probe.accuracy() == {"a": 1.0, "sid": 1.0}
    wrong = pred.copy()
    wrong[:, 0] = (wrong[:, 0] + 1) % LEVELS[0][1]  # every level-a code off by one
    probe.targets = torch.from_numpy(wrong)
    assert probe.accuracy() == {"a": 0.0, "sid": 0.0}
    half = pred.copy()
    half[::2, 2] = (half[::2, 2] + 1) % LEVELS[2][1]  # level c wrong on every other item
    probe.targets = torch.from_numpy(half)
    acc = probe.accuracy()
    assert acc["a"] == 1.0 and acc["sid"] == pytest.approx(1 - len(half[::2]) / len(half))


def test_chance_is_the_share_of_the_most_frequent_answer():
    codes = [[1, i % 3, i % 2] for i in range(12)]  # every item in level-a code 1
    *_, probe = setup(False, codes=codes)
    assert probe.chance["a"] == 1.0
    # (b, c) = (i % 3, i % 2) repeats with period 6: each full SID twice among 12
    assert probe.chance["sid"] == pytest.approx(2 / 12)
    *_, probe = setup(False)  # CODES: level a 4/4/4 over codes 0, 1, 2; SIDs unique
    assert probe.chance == {"a": pytest.approx(4 / 12), "sid": pytest.approx(1 / 12)}


def test_held_out_template_is_not_a_training_template():
    assert HELD_OUT_TEXT_TO_SID not in TEXT_TO_SID
    assert "{text}" in HELD_OUT_TEXT_TO_SID


def test_geometry_matches_geodiag_functions_and_schema():
    tok, model, ext, rows, probe = setup(True)
    entry = structure_entry(7, 12.5, probe)
    assert set(entry) == {"step", "elapsed_s", "measure_s", "structure"}
    assert entry["step"] == 7 and entry["elapsed_s"] == 12.5 and entry["measure_s"] >= 0
    s = entry["structure"]
    assert {
        "effective_rank_ratio",
        "spread_relative",
        "mean_pairwise_cosine",
        "rsa",
        "rsa_p",
        "code_accuracy",
        "code_accuracy_chance",
    } <= set(s)
    assert set(s["rsa"]) == set(s["rsa_p"]) == {"a", "b", "c"}
    assert set(s["code_accuracy"]) == set(s["code_accuracy_chance"]) == {"a", "sid"}
    x = rows.inp.detach().double().numpy()
    ref = reference_rows(model.get_input_embeddings().weight, ext.base_vocab_size, len(x), 0)
    g = summarize(x, ref)
    assert s["effective_rank_ratio"] == g.centered.effective_rank_ratio
    assert s["spread_relative"] == g.spread_relative
    assert s["mean_pairwise_cosine"] == g.mean_pairwise_cosine
    offsets = np.cumsum([0, *(size for _, size in LEVELS)])
    for li, (name, _) in enumerate(LEVELS):
        r = rsa(
            x[offsets[li] : offsets[li + 1]], BOOKS[name], n_permutations=50, seed=0, max_items=1000
        )
        assert s["rsa"][name] == r.spearman and s["rsa_p"][name] == r.p_value


STRUCTURE_KEYS = {
    "effective_rank_ratio",
    "spread_relative",
    "mean_pairwise_cosine",
    "rsa",
    "rsa_p",
    "rsa_permutations",
    "code_accuracy",
    "code_accuracy_chance",
    "probe_items",
}


def test_run_init_logs_the_structure_curve(world):
    from gti.init.config import GroundingConfig, InitConfig
    from gti.init.run import run_init

    g = GroundingConfig(steps=5, batch_size=4, progress=False, structure_every=2)
    out = run_init(InitConfig(sids=world.sids_dir, out=world.root / "c", grounding=g))
    lines = [json.loads(x) for x in (out / "train_log.jsonl").read_text().splitlines()]
    curve = [e for e in lines if "structure" in e]
    assert [e["step"] for e in curve] == [0, 2, 4, 5]  # start, every 2, and the end
    step_seconds = 0.0
    for e in lines:
        if "structure" in e:
            assert set(e) == {"step", "elapsed_s", "measure_s", "structure"}
            assert set(e["structure"]) == STRUCTURE_KEYS
            # training seconds only: the sum of the steps' own (4-decimal) seconds
            assert e["elapsed_s"] == pytest.approx(step_seconds, abs=1e-3)
            assert set(e["structure"]["rsa"]) == {"a", "b", "c"}
        else:
            step_seconds += e["seconds"]
    assert curve[0]["structure"]["rsa"]["a"] is None  # mean init: rows identical, undefined
    assert curve[-1]["structure"]["rsa"]["a"] is not None
    json.dumps(lines, allow_nan=False)  # strict JSON


def test_curve_plot_reads_the_log_and_writes_a_png(tmp_path):
    from gti.init.curve import plot_curves, read_curve

    log = tmp_path / "train_log.jsonl"
    lines = [{"step": 1, "loss": 3.0, "seconds": 0.5}]
    for step, r in ((0, None), (2, 0.1), (4, 0.2)):
        s = {
            "rsa": {"a": r, "b": r, "c": r},
            "code_accuracy": {"a": 0.1, "sid": 0.0},
            "code_accuracy_chance": {"a": 0.02, "sid": 0.004},
        }
        lines.append({"step": step, "elapsed_s": step * 0.5, "measure_s": 0.1, "structure": s})
    log.write_text("".join(json.dumps(x) + "\n" for x in lines))
    curve = read_curve(log)
    assert [e["step"] for e in curve] == [0, 2, 4]  # step lines skipped
    out = plot_curves({"run": curve}, tmp_path / "curve.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_reference_sample_is_geodiags_seeded_draw_with_its_cap():
    from geodiag.analysis.options import AnalyzeOptions
    from geodiag.analysis.rows import reference_sample

    ids = reference_sample(50, 30, seed=3, cap=8)
    assert len(ids) == 8 and len(set(ids)) == 8 and list(ids) == sorted(ids)
    assert (ids == reference_sample(50, 30, seed=3, cap=8)).all()
    assert len(reference_sample(50, 30, seed=3)) == 30  # no cap
    assert len(reference_sample(50, 80, seed=3)) == 50  # never more than the vocabulary
    # The probe's reference rows are exactly those ids (every row here usable).
    emb = torch.arange(1, 50 * 4 + 1, dtype=torch.float32).reshape(50, 4)
    got = reference_rows(emb, 50, 30, 3)
    want = reference_sample(50, 30, 3, AnalyzeOptions.reference_cap)
    assert np.array_equal(got, emb.double().numpy()[want])
