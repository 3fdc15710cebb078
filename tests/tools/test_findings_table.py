"""The false-FAIL table's fast subset (tools/findings_table.py over a corpus of tiny models
made by real procedures): no FAIL on the healthy checkpoints, every broken one caught by
proof or a measured movement, a row per rule; and LLaMA-Factory's noise_init as the corpus
reproduces it (mean of the old rows plus N(0, 1/d) per entry)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "geodiag"))
from tiny_models import save, tiny_lm, word_tokenizer  # noqa: E402

from geodiag.analysis.evidence import EVIDENCE  # noqa: E402
from geodiag.gate.checks import CHECKS  # noqa: E402
from tools.findings_corpus import Entry, full_covariance, noise_init  # noqa: E402
from tools.findings_table import judge, render, rewrite  # noqa: E402

NEW = [f"<a_{i}>" for i in range(8)]


def _train(model, tok, steps: int, words: list[str], seed: int) -> None:
    """Full fine-tuning on short records of ``words`` (every parameter, AdamW)."""
    g = np.random.default_rng(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(steps):
        texts = [" ".join(g.choice(words, size=12)) for _ in range(8)]
        ids = torch.tensor([tok.convert_tokens_to_ids(t.split()) for t in texts])
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    tok = word_tokenizer(120)
    model = tiny_lm(len(tok), hidden_size=32, intermediate_size=64)
    _train(model, tok, 60, [f"w{i}" for i in range(120)], seed=0)  # a "pretrained" base
    tok.add_tokens(NEW)
    model.resize_token_embeddings(len(tok))  # transformers' mean_resizing
    init = save(model, root / "mean-resizing", tok)
    w = model.get_input_embeddings().weight
    n_old = len(tok) - len(NEW)
    with torch.no_grad():
        old = w[:n_old].double().numpy()
        w[n_old:] = torch.tensor(full_covariance(old, np.arange(len(NEW))), dtype=w.dtype)
    draw = save(model, root / "full-covariance", tok)
    _train(model, tok, 80, NEW + [f"w{i}" for i in range(20)], seed=1)  # every new token fed
    sft = save(model, root / "sft", tok)
    with torch.no_grad():
        w[n_old:] = 0
    zero = save(model, root / "zero", tok)
    return [
        Entry("sft", True, "full-covariance draw, 80 full fine-tuning steps", sft),
        Entry("sft, --reference its init", True, "the same", sft, ["--reference", str(draw)]),
        Entry("full covariance", True, "N(mean, Sigma)", draw),
        Entry("mean_resizing, untouched", False, "resize only", init),
        Entry("zero", False, "rows set to 0", zero),
        Entry("init, --reference itself", False, "never trained", init, ["--reference", str(init)]),
    ]


def test_no_false_fail_and_every_broken_one_caught(corpus):
    judged = [judge(e) for e in corpus]
    for j in judged:
        assert j.exit_code == (0 if j.healthy else 1), (j.name, j.checks)
    by = {j.name: j for j in judged}
    assert by["zero"].rows["zero"] == len(NEW)
    assert by["init, --reference itself"].rows["barely_moved"] == len(NEW)
    assert by["mean_resizing, untouched"].rows["vocabulary_mean"] == len(NEW)


def test_the_table_has_a_row_per_rule_and_rewrites_its_section(corpus, tmp_path):
    section = render([judge(e) for e in corpus[:2]], ["the big models"], "today")
    for c in CHECKS:
        assert f"| check `{c.name}` |" in section
    for kind in EVIDENCE:
        assert f"| finding `{kind}` |" in section
    assert "Left out (not built or not found here): the big models." in section
    doc = tmp_path / "findings.md"
    doc.write_text("# Findings\n\ntext\n")
    assert rewrite(doc, section) and not rewrite(doc, section)  # appended once, then current
    assert doc.read_text().count(section) == 1


def test_noise_init_is_the_mean_plus_unit_noise_per_row():
    """LLaMA-Factory's _noisy_mean_initialization: E[row] = the old rows' mean, and the
    noise's variance per entry 1/d (a chi-square bound on 64 x 256 entries)."""
    d, n_old = 256, 100
    model = tiny_lm(n_old + 64, hidden_size=d, intermediate_size=16, num_attention_heads=4)
    w = model.get_input_embeddings().weight
    noise_init(model, n_old, seed=3)
    old = w[:n_old].detach().double().numpy()
    noise = w[n_old:].detach().double().numpy() - old.mean(0)
    var = float((noise**2).mean())
    assert abs(var * d - 1) < 4 * np.sqrt(2 / noise.size)  # 4 standard errors
    assert abs(float(noise.mean())) < 4 / np.sqrt(d * noise.size)
