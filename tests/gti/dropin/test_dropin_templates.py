"""Grounding's prompt templates live in one editable TOML file (``--templates``)."""

from __future__ import annotations

import pytest
import torch

from geodiag.errors import InputError
from gti.init.pairs import PairStream
from gti.models.tiny import build_tiny_tokenizer
from gti.prompts import SID_TO_TEXT, TEMPLATES_FILE, TEXT_TO_SID, load_templates


def test_the_shipped_file_is_the_default_templates():
    assert load_templates(TEMPLATES_FILE) == (TEXT_TO_SID, SID_TO_TEXT)
    assert len(TEXT_TO_SID) == len(SID_TO_TEXT) == 5


def test_a_users_file_is_what_the_stream_renders(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text('text_to_sid = ["name it {text}"]\nsid_to_text = ["say {sid}"]\n')
    templates = load_templates(path)
    tok = build_tiny_tokenizer(["name it red car", "say", "<a_1>"])
    tok.add_tokens(["<a_1>"])
    slot = -torch.ones(len(tok), dtype=torch.long)
    slot[tok.convert_tokens_to_ids("<a_1>")] = 0
    stream = PairStream(
        tok, ["red car"], ["<a_1>"], slot, batch_size=2, seed=0, templates=templates
    )
    rendered = {tok.decode(stream.example(stream.key(i)).input_ids) for i in range(2)}
    assert rendered == {"name it red car <a_1> </s>", "say <a_1> red car </s>"}


@pytest.mark.parametrize(
    "text, error",
    [
        (
            'text_to_sid = ["no hole"]\nsid_to_text = ["{sid}"]\n',
            r"text_to_sid\[0\] must be a string holding \{text\}",
        ),
        (
            'text_to_sid = ["{text} {other}"]\nsid_to_text = ["{sid}"]\n',
            "only {text} may be in braces",
        ),
        ('text_to_sid = ["{text}"]\n', "'sid_to_text' must be a non-empty list"),
    ],
)
def test_a_bad_templates_file_names_the_file_and_the_template(tmp_path, text, error):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(InputError, match=error) as e:
        load_templates(path)
    assert "bad.toml" in str(e.value)
