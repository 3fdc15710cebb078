"""Untrained rows of tokens outside the new set that the chat template or --data feed
(geodiag.analysis.fed), on checkpoints transformers writes.

The base: a tiny Llama built from a config, with a Llama-3-style chat template whose
header and end-of-turn tokens are special tokens of the base with zero rows (as Llama-3
base ships ``<|start_header_id|>``, ``<|end_header_id|>`` and ``<|eot_id|>``), then
extended with Semantic-ID tokens whose rows are distinct (trained). Before: PASS (the
specials are no new tokens, and only new rows were judged).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from geodiag.cli import app

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("jinja2")
pytest.importorskip("tokenizers")
from tiny_models import save, tiny_lm, word_tokenizer  # noqa: E402

N_WORDS = 60
NEW_TOKENS = [f"<{level}_{code}>" for level in "abc" for code in range(6)]
HEADERS = ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
BOS = "<|begin_of_text|>"
# Llama-3's chat template, as its tokenizer_config.json holds it (without the tool parts).
TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}"
    "<|end_header_id|>\n\n{{ message['content'] | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def _checkpoint(folder, *, zero_headers: bool, zero_words=(), tied: bool = True):
    """The base (specials' rows zero or not) extended with NEW_TOKENS, new rows distinct."""
    tok = word_tokenizer(N_WORDS)
    tok.add_special_tokens({"bos_token": BOS, "additional_special_tokens": HEADERS})
    tok.chat_template = TEMPLATE
    n_base = len(tok)
    model = tiny_lm(n_base, tied=tied, seed=3)
    zeroed = [tok.convert_tokens_to_ids(t) for t in HEADERS] if zero_headers else []
    zeroed += [tok.convert_tokens_to_ids(w) for w in zero_words]
    with torch.no_grad():
        for w in {
            id(m.weight): m.weight for m in (model.get_input_embeddings(), model.lm_head)
        }.values():
            w[zeroed] = 0.0
    tok.add_tokens(NEW_TOKENS)
    model.resize_token_embeddings(len(tok))
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for m in {id(m.weight): m for m in (model.get_input_embeddings(), model.lm_head)}.values():
            pick = torch.randperm(N_WORDS, generator=g)[: len(NEW_TOKENS)] + 1
            m.weight[n_base:] = m.weight[pick] + 0.5 * m.weight[pick.roll(1)]
    return save(model, folder, tok)


def test_zero_template_specials_fail_naming_the_token_and_its_source(tmp_path):
    folder = _checkpoint(tmp_path / "ckpt", zero_headers=True)
    assert (
        "chat_template" in json.loads((folder / "tokenizer_config.json").read_text())
        or (folder / "chat_template.jinja").is_file()
    )
    res = run("check", folder)
    assert res.exit_code == 1, res.output
    line = next(x for x in res.output.splitlines() if "[fail] n_untrained" in x)
    assert "n_untrained 3 > 0" in line
    for token in HEADERS:
        assert f"{token} (special; all zero" in line
    assert "<|eot_id|> (special; all zero; fed 3x per conversation)" in line
    assert "outside the new set, fed by the chat template (" in line
    assert BOS not in line  # trained: the template feeds it, its row is not untrained


def test_trained_template_specials_pass(tmp_path):
    res = run("check", _checkpoint(tmp_path / "ckpt", zero_headers=False))
    assert res.exit_code == 0, res.output


def test_data_tokens_with_zero_rows_fail_with_their_count(tmp_path):
    folder = _checkpoint(tmp_path / "ckpt", zero_headers=False, zero_words=["w7"])
    data = tmp_path / "train.jsonl"
    rows = [{"text": "w1 w7 w7 <a_0>"}, {"messages": [{"role": "user", "content": "w7 w2"}]}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = run("check", folder, "--data", data)
    assert res.exit_code == 1, res.output
    line = next(x for x in res.output.splitlines() if "[fail] n_untrained" in x)
    assert "w7 (all zero; fed 3x in train.jsonl)" in line
    assert "n_untrained 1 > 0" in line
    # w7 in no data file: nothing feeds it, so nothing to fail
    assert run("check", folder).exit_code == 0


def test_fed_rows_are_judged_by_the_hand_computed_rule(tmp_path):
    """The rows the gate calls untrained: exactly the zero rows among the fed ones."""
    from geodiag.analysis.checkpoint import measure_checkpoint

    folder = _checkpoint(tmp_path / "ckpt", zero_headers=True)
    rep = measure_checkpoint(folder)
    fed = rep.matrices[0].fed
    assert (
        fed is not None
        and fed.sources == ["the chat template (tokenizer_config.json)"]
        or (fed.sources == ["the chat template (chat_template.jinja)"])
    )
    assert fed.n_fed == 4  # BOS and the three headers
    assert sorted(t.token for t in fed.tokens) == sorted(HEADERS)
    assert all(t.findings[0] == "zero" and t.norm == 0.0 for t in fed.tokens)
    counts = {t.token: t.uses for t in fed.tokens}
    # per conversation: system, user, assistant turns, no generation prompt
    assert counts == {"<|start_header_id|>": 3, "<|end_header_id|>": 3, "<|eot_id|>": 3}
    np.testing.assert_equal(fed.counted(4), 0)


def test_blocks_and_the_identical_budget_give_the_same_rows(tmp_path, monkeypatch):
    """Zero and mean tested a block at a time, identical rows among the most used only:
    with blocks of 2 rows and room for 3 rows, the zero rows are the same three, and the
    one fed token past the budget is counted as left out."""
    from geodiag.analysis import fed as fed_mod
    from geodiag.analysis.checkpoint import measure_checkpoint

    folder = _checkpoint(tmp_path / "ckpt", zero_headers=True)
    monkeypatch.setattr(fed_mod, "FED_BLOCK_ROWS", 2)
    monkeypatch.setattr(fed_mod, "FED_IDENTICAL_ELEMENTS", 3 * 16)  # 3 rows of width 16
    fed = measure_checkpoint(folder).matrices[0].fed
    assert sorted(t.token for t in fed.tokens) == sorted(HEADERS)
    assert fed.n_fed == 4 and fed.n_left_out == 1


# TRL's setup_chat_format (trl/models/utils.py, TRL < 1.0; TRL 1.16 replaced it with
# clone_chat_template, which copies a source tokenizer's added tokens, special flags and
# all, the same way): ChatML's two tokens added as special tokens, bos/eos/pad set to
# them, the ChatML template, then resize_token_embeddings (their rows: the mean).
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _setup_chat_format(model, tok):
    tok.add_special_tokens(
        {
            "bos_token": "<|im_start|>",
            "eos_token": "<|im_end|>",
            "pad_token": "<|im_end|>",
            "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        }
    )
    tok.chat_template = CHATML
    model.resize_token_embeddings(len(tok))


def test_chat_format_specials_at_the_mean_are_named_and_fail(tmp_path):
    """Before: PASS, the two specials left out of the new tokens (a note no `check` line
    showed) and their mean rows never judged."""
    tok = word_tokenizer(N_WORDS)
    model = tiny_lm(len(tok), seed=5)
    _setup_chat_format(model, tok)
    n_base = len(tok)
    tok.add_tokens(NEW_TOKENS)
    model.resize_token_embeddings(len(tok))
    g = torch.Generator().manual_seed(6)
    with torch.no_grad():
        w = model.get_input_embeddings().weight
        pick = torch.randperm(N_WORDS, generator=g)[: len(NEW_TOKENS)] + 1
        w[n_base:] = w[pick] + 0.5 * w[pick.roll(1)]
    folder = save(model, tmp_path / "chatml", tok)
    res = run("check", folder)
    assert res.exit_code == 1, res.output
    line = next(x for x in res.output.splitlines() if "[fail] n_untrained" in x)
    assert "n_untrained 2 > 0" in line
    assert "<|im_start|> (special; at the vocabulary mean; fed 3x per conversation)" in line
    assert "<|im_end|> (special; at the vocabulary mean; fed 3x per conversation)" in line
    note = next(x for x in res.output.splitlines() if "special token(s) not measured" in x)
    assert "2 added special token(s)" in note and "(<|im_start|>, <|im_end|>)" in note
    assert ": <|im_end|>, <|im_start|> never trained" in note
