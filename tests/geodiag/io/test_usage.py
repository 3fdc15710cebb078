"""Which untrained tokens matter: usage from --data, the chat template and the item IDs
(geodiag.io.usage, the gate's rule GateConfig.untrained_uses_to_fail), on checkpoints
saved by transformers with a tokenizer the tokenizers library reads back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from tiny_models import save, tiny_lm, word_tokenizer  # noqa: E402

import geodiag  # noqa: E402
from geodiag.errors import InputError  # noqa: E402
from geodiag.gate.checks import GateConfig, run_gate  # noqa: E402
from geodiag.io.checkpoint import open_checkpoint  # noqa: E402
from geodiag.io.sources.options import ReadOptions  # noqa: E402
from geodiag.io.usage import count_file, record_texts, render_template, token_usage  # noqa: E402

N_WORDS = 120
NEW = [f"<x_{i}>" for i in range(10)]
UNTRAINED = NEW[5:]  # left at the vocabulary mean


def _sft_like(path: Path) -> Path:
    """A tiny model whose new tokens <x_0>..<x_4> have rows of their own (trained) and
    <x_5>..<x_9> sit at the original rows' mean (a mean init nothing moved)."""
    import torch

    tok = word_tokenizer(N_WORDS)
    tok.add_tokens(NEW)
    model = tiny_lm(N_WORDS + 1, hidden_size=16)
    model.resize_token_embeddings(len(tok), mean_resizing=False)
    w = model.get_input_embeddings().weight
    with torch.no_grad():
        base = w[: N_WORDS + 1]
        w[N_WORDS + 1 : N_WORDS + 6] = torch.randn(5, w.shape[1]) * base.std()
        w[N_WORDS + 6 :] = base.mean(0)
    return save(model, path, tok)


@pytest.fixture
def sft(tmp_path):
    return _sft_like(tmp_path / "sft")


def _jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _untrained(report, **settings):
    res = run_gate(report, GateConfig(**settings))
    return next(c for c in res.checks if c.name == "n_untrained")


def test_data_counts_each_new_token_as_the_tokenizer_splits_it(sft, tmp_path):
    data = _jsonl(
        tmp_path / "train.jsonl",
        [
            {"text": "w1 <x_5> w2 <x_5>"},
            {
                "messages": [
                    {"role": "user", "content": "w3 <x_0>"},
                    {"role": "assistant", "content": [{"type": "text", "text": "<x_5> <x_1>"}]},
                ]
            },
            {"prompt": "w4", "completion": "<x_1>"},
        ],
    )
    ckpt = open_checkpoint(sft, ReadOptions(data=(data,)))
    usage = token_usage(ckpt)
    (source,) = usage.sources
    # Units are records (3), not the texts they hold (5: a chat record gives one per message).
    assert (source.name, source.kind, source.units, source.complete) == (
        "train.jsonl",
        "data",
        3,
        True,
    )
    counts = dict(zip(ckpt.new.tokens, usage.counts[0].tolist(), strict=True))
    # Reference: the tokenizers library's own split of each text, counted by hand.
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(sft / "tokenizer.json"))
    texts = ["w1 <x_5> w2 <x_5>", "w3 <x_0>", "<x_5> <x_1>", "w4", "<x_1>"]
    want = {t: 0 for t in NEW}
    for text in texts:
        for piece in tok.encode(text, add_special_tokens=False).tokens:
            if piece in want:
                want[piece] += 1
    assert want["<x_5>"] == 3 and want["<x_1>"] == 2
    assert counts == want
    assert source.new_tokens_fed == 3


def test_an_untrained_token_the_data_feeds_fails_naming_it_with_its_count(sft, tmp_path):
    data = _jsonl(tmp_path / "train.jsonl", [{"text": "w1 <x_5> <x_5> <x_0>"}] * 206)
    rep = geodiag.measure(sft, data=[data])
    u = rep.matrices[0].untrained
    assert u.n_untrained == 5 and u.usage_sources == ["train.jsonl"]
    assert u.untrained_used.tokens == ["<x_5>"] and u.untrained_unused.size == 4
    res = _untrained(rep)
    assert (res.status, res.value) == ("fail", 1)
    assert "<x_5> (412x in train.jsonl)" in res.message
    # Allowed: the four the data never feeds still warn, named, with why they cannot matter.
    res = _untrained(rep, max_untrained_tokens=1)
    assert res.status == "warn"
    assert "5 of 10 new rows never left their init" in res.message
    assert "; 1 counted, as something feeds them: <x_5>" in res.message
    assert "; 4 spared, as nothing feeds them" in res.message
    assert "the 4 spared cannot matter" in res.message
    assert "absent from train.jsonl" in res.message and "<x_9>" in res.message


def test_data_that_feeds_no_untrained_token_passes_with_a_warning(sft, tmp_path):
    data = tmp_path / "train.txt"  # plain text: one example per line
    data.write_text("w1 <x_0> w2\nw3 <x_4>\n", encoding="utf-8")
    rep = geodiag.measure(sft, data=[data])
    res = _untrained(rep)
    assert (res.status, res.value) == ("warn", 0)
    assert "5 of 10 new rows never left their init" in res.message and "counted" not in res.message
    assert "; 5 spared, as nothing feeds them" in res.message
    assert rep.usage[0].unit == "lines" and rep.usage[0].units == 2
    assert run_gate(rep, GateConfig()).passed


def test_without_usage_every_untrained_token_counts_and_the_message_says_which_flag(sft):
    rep = geodiag.measure(sft)
    res = _untrained(rep)
    assert (res.status, res.value) == ("fail", 5)
    assert "--data FILE" in res.message
    assert rep.matrices[0].untrained.usage_sources == []


def test_the_rule_at_zero_counts_every_untrained_token(sft, tmp_path):
    data = _jsonl(tmp_path / "d.jsonl", [{"text": "w1"}])
    rep = geodiag.measure(sft, data=[data])
    assert _untrained(rep).status == "warn"
    res = _untrained(rep, untrained_uses_to_fail=0)
    assert (res.status, res.value) == ("fail", 5)
    # A higher rule: a token used fewer times than it is spared.
    data = _jsonl(tmp_path / "e.jsonl", [{"text": "<x_5> <x_6> <x_6>"}])
    rep = geodiag.measure(sft, data=[data])
    res = _untrained(rep, untrained_uses_to_fail=2)
    assert (res.status, res.value) == ("fail", 1) and "<x_6> (2x in e.jsonl)" in res.message


LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    " + message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
LLAMA3_SPECIALS = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|reserved_special_token_2|>",
    "<|eot_id|>",
]


def _llama3_style_base(path: Path) -> Path:
    """A base whose special tokens' rows pretraining never trained (zero, as Llama-3's
    base checkpoints have them), saved with the instruct chat template."""
    import torch

    tok = word_tokenizer(N_WORDS)
    tok.add_special_tokens({"additional_special_tokens": LLAMA3_SPECIALS})
    tok.bos_token, tok.eos_token = "<|begin_of_text|>", "<|end_of_text|>"
    tok.chat_template = LLAMA3_TEMPLATE
    model = tiny_lm(len(tok), hidden_size=16)
    with torch.no_grad():
        model.get_input_embeddings().weight[N_WORDS + 1 :] = 0
    return save(model, path, tok)


def test_a_base_with_an_instruct_template_whose_tokens_are_untrained_fails_naming_it(tmp_path):
    base = _llama3_style_base(tmp_path / "llama3-base")
    assert (
        "chat_template" in json.loads((base / "tokenizer_config.json").read_text())
        or (base / "chat_template.jinja").is_file()
    )
    # Special tokens are new when the user says so: the range of the base's own specials.
    specials = ReadOptions(new_tokens=(N_WORDS + 1, N_WORDS + 1 + len(LLAMA3_SPECIALS)))
    rep = geodiag.measure(base, read=specials)
    (source,) = rep.usage
    assert source.kind == "chat template" and source.complete is False
    fed = {t.token: t.used_by for t in rep.matrices[0].untrained.tokens if t.uses}
    # Reference: what the template renders, token by token, as transformers renders it.
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(base)
    rendered = hf.apply_chat_template(
        [{"role": "user", "content": "Hello"}], add_generation_prompt=True, tokenize=False
    )
    emitted = {t for t in LLAMA3_SPECIALS if t in rendered}
    assert emitted == {
        "<|begin_of_text|>",
        "<|start_header_id|>",
        "<|end_header_id|>",
        "<|eot_id|>",
    }
    assert set(fed) == emitted
    res = _untrained(rep)
    assert res.status == "fail"
    assert f"<|start_header_id|> (emitted by {source.name})" in res.message
    # The reserved slots: no source says (no --data), so they count too, and the message
    # says which flag would settle them.
    assert res.value == 8 and "--data FILE" in res.message
    # Said once for the four of unknown use, not "(usage unknown)" after each of them.
    assert "; 4 for which no source says whether anything feeds them (--data" in res.message
    assert "usage unknown" not in res.message and res.message.count("--data FILE") == 1
    # With data that never holds them, only the template's tokens fail.
    data = _jsonl(tmp_path / "chat.jsonl", [{"messages": [{"role": "user", "content": "w1 w2"}]}])
    res = _untrained(geodiag.measure(base, read=specials, data=[data]))
    assert (res.status, res.value) == ("fail", 4) and "<|reserved_special_token_0|>" in res.message
    # All 8 untrained (zero: no init known, so not "never left their init"): 4 counted
    # (the template's), 4 spared, both said.
    assert "8 of 8 new rows are untrained" in res.message and "8 all zero" in res.message
    assert "; 4 counted, as something feeds them: " in res.message
    assert "; 4 spared, as nothing feeds them (absent from chat.jsonl" in res.message


def test_chat_template_flag_overrides_the_checkpoints_own(sft, tmp_path):
    template = tmp_path / "t.jinja"
    template.write_text(
        "{% for m in messages %}<x_7>{{ m['content'] }}{% endfor %}", encoding="utf-8"
    )
    rep = geodiag.measure(sft, chat_template=template)
    t = next(t for t in rep.matrices[0].untrained.tokens if t.token == "<x_7>")
    # Once per message of the fullest conversation rendered (system, user, assistant).
    assert t.used_by == {"the chat template (" + str(template) + ")": 3}


def test_render_template_survives_a_template_that_refuses_a_system_turn():
    template = (
        "{% if messages[0]['role'] == 'system' %}{{ raise_exception('no system') }}{% endif %}"
        "{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}"
    )
    out = render_template(template, {})
    assert out and all("[user]Hello" in r for r in out)
    with pytest.raises(ValueError, match="does not render"):
        render_template("{{ raise_exception('never') }}", {})


def test_bad_data_is_exit_2_naming_the_file_and_line(sft, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "w1"}\n{"text": \n', encoding="utf-8")
    with pytest.raises(InputError, match=r"bad.jsonl: line 2: not JSON"):
        geodiag.measure(sft, data=[bad])
    nofield = _jsonl(tmp_path / "nofield.jsonl", [{"input": "w1"}])
    with pytest.raises(InputError, match=r"line 1: no text field .*has input"):
        geodiag.measure(sft, data=[nofield])
    with pytest.raises(InputError, match="no such file"):
        geodiag.measure(sft, data=[tmp_path / "missing.jsonl"])
    with pytest.raises(InputError, match="must be a string or a list"):
        record_texts({"text": 3}, bad, 1)
    run = subprocess.run(
        [sys.executable, "-m", "geodiag.cli", "check", str(sft), "--data", str(bad)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2 and "bad.jsonl: line 2: not JSON" in run.stderr


def test_the_cli_counts_repeatable_data_files(sft, tmp_path):
    a = _jsonl(tmp_path / "a.jsonl", [{"text": "<x_5>"}])
    b = _jsonl(tmp_path / "b.jsonl", [{"text": "<x_5> <x_6>"}])
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "geodiag.cli",
            "check",
            str(sft),
            "--data",
            str(a),
            "--data",
            str(b),
            "--json",
        ],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 1, run.stderr
    res = next(
        c for c in json.loads(run.stdout)["results"][0]["checks"] if c["name"] == "n_untrained"
    )
    assert res["value"] == 2
    assert "<x_5> (1x in a.jsonl, 1x in b.jsonl)" in res["message"]
    metrics = subprocess.run(
        [sys.executable, "-m", "geodiag.cli", "metrics", str(sft), "--data", str(b), "--json"],
        capture_output=True,
        text=True,
    )
    doc = json.loads(metrics.stdout)
    assert [s["name"] for s in doc["usage"]] == ["b.jsonl"]
    tokens = {t["token"]: t for t in doc["matrices"][0]["untrained"]["tokens"]}
    assert tokens["<x_6>"]["used_by"] == {"b.jsonl": 1} and tokens["<x_9>"]["uses"] == 0


def test_counting_streams_in_batches_and_reports_progress(sft, tmp_path, monkeypatch):
    from tokenizers import Tokenizer

    import geodiag.io.usage as usage

    monkeypatch.setattr(usage, "BATCH_TEXTS", 7)
    monkeypatch.setattr(usage, "PROGRESS_AFTER", 0.0)
    monkeypatch.setattr(usage, "PROGRESS_EVERY", 0.0)
    data = _jsonl(tmp_path / "big.jsonl", [{"text": f"w{i % 50} <x_{i % 10}>"} for i in range(100)])
    tok = Tokenizer.from_file(str(sft / "tokenizer.json"))
    said: list[str] = []
    source, counts = count_file(data, tok, tok.get_vocab_size(), say=said.append)
    want = np.zeros(tok.get_vocab_size(), np.int64)
    for i in range(100):
        for t in tok.encode(f"w{i % 50} <x_{i % 10}>", add_special_tokens=False).ids:
            want[t] += 1
    assert np.array_equal(counts, want) and source.units == 100
    assert len(said) >= 100 // 7 and said[-1].startswith("counted big.jsonl")


def test_the_counts_reach_the_junit_the_job_summary_and_the_sarif(sft, tmp_path):
    data = _jsonl(tmp_path / "train.jsonl", [{"text": "<x_5> <x_5> <x_6>"}])
    junit, sarif, summary = tmp_path / "g.xml", tmp_path / "g.sarif", tmp_path / "summary.md"
    run = subprocess.run(
        [sys.executable, "-m", "geodiag.cli", "check", str(sft), "--data", str(data)]
        + ["--junit", str(junit), "--sarif", str(sarif)],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "GITHUB_STEP_SUMMARY": str(summary)},
    )
    assert run.returncode == 1, run.stderr
    for path in (junit, sarif, summary):
        text = path.read_text(encoding="utf-8")
        assert "<x_5> (2x in train.jsonl)" in text.replace("&lt;", "<").replace("&gt;", ">"), path
    results = json.loads(sarif.read_text())["runs"][0]["results"]
    (fail,) = [r for r in results if r["ruleId"] == "n_untrained"]
    assert fail["level"] == "error" and "3 spared, as nothing feeds them" in fail["message"]["text"]


def test_the_report_shows_what_feeds_each_flagged_token(sft, tmp_path):
    pytest.importorskip("matplotlib")
    data = _jsonl(tmp_path / "train.jsonl", [{"text": "<x_5> <x_5> <x_5>"}])
    html = tmp_path / "r.html"
    run = subprocess.run(
        [sys.executable, "-m", "geodiag.cli", "report", str(sft), "--data", str(data)]
        + ["-o", str(html), "--permutations", "0"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    page = html.read_text(encoding="utf-8")
    assert "<th>used by</th>" in page and "3x train.jsonl" in page
    doc = json.loads(html.with_suffix(".json").read_text(encoding="utf-8"))
    (entry,) = doc["checkpoints"]
    tokens = {t["token"]: t for t in entry["report"]["matrices"][0]["untrained"]["tokens"]}
    assert tokens["<x_5>"]["used_by"] == {"train.jsonl": 3}
    assert tokens["<x_6>"]["uses"] == 0 and tokens["<x_6>"]["usage_known"] is True


def test_without_jinja2_check_says_the_template_was_not_counted(sft, tmp_path, monkeypatch):
    """The light install (no `usage` extra): the template is not rendered, and `check`
    says so beside its verdict instead of judging as if it had been."""
    import importlib.util

    from typer.testing import CliRunner

    from geodiag.cli import app

    template = tmp_path / "t.jinja"
    template.write_text("{% for m in messages %}<x_7>{% endfor %}", encoding="utf-8")
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "jinja2" else real(name, *a)
    )
    res = CliRunner().invoke(app, ["check", str(sft), "--chat-template", str(template)])
    assert res.exit_code == 1, res.output
    assert "note: chat template" in res.stdout and "needs jinja2" in res.stdout
    assert "pip install 'geodiag[usage]'" in res.stdout
