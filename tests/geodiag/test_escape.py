"""Names from files, escaped for each place geodiag writes them (geodiag.escape): each rule
against hand-computed cases and the readers' own rules (the GitHub runner's unescaping,
ElementTree, json)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from geodiag import escape
from geodiag.errors import print_unexpected

# --- each rule, by hand ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("<a_1>\x1b[2J", "<a_1>\\x1b[2J"),
        ("a\nb\tc\rd", "a\\nb\\tc\\rd"),
        ("\x00\x0b\x7f\x85\x9f", "\\x00\\x0b\\x7f\\x85\\x9f"),
        ("x\u202ey\u2066z\u2069", "x\\u202ey\\u2066z\\u2069"),
        ("\u2028\u2029", "\\u2028\\u2029"),
        ("\ud800", "\\ud800"),
        ("<a_0>\n::error file=x,line=1::INJECTED", "<a_0>\\n::error file=x,line=1::INJECTED"),
        ("::error::x", "\\x3a:error::x"),
        ("  \u3000::add-mask::x", "  \u3000\\x3a:add-mask::x"),
        ("a ::b", "a ::b"),
        ("x##[error]y ##[", "x##\\x5berror]y ##\\x5b"),
        # printable text of any script, joiners and backslashes stay as they are
        ("é日本語 😀 \u200d\u00a0 a\\x1b \u200f", "é日本語 😀 \u200d\u00a0 a\\x1b \u200f"),
    ],
)
def test_terminal(raw, shown):
    assert escape.terminal(raw) == shown
    assert escape.terminal(shown) == shown  # twice changes nothing


def test_terminal_lines_break_only_between_lines():
    lines = ["a", "  ::stop-commands::t", "b\nc"]
    assert escape.terminal_lines(lines) == "a\n  \\x3a:stop-commands::t\nb\\nc"


def unescape_data(s: str) -> str:
    """actions/runner ActionCommand.UnescapeData, mapping for mapping."""
    return s.replace("%0D", "\r").replace("%0A", "\n").replace("%25", "%")


def unescape_property(s: str) -> str:
    """actions/runner ActionCommand.UnescapeProperty, mapping for mapping."""
    for token, code in (("\r", "%0D"), ("\n", "%0A"), (":", "%3A"), (",", "%2C"), ("%", "%25")):
        s = s.replace(code, token)
    return s


def test_workflow_message_and_property():
    assert escape.workflow_message("50% a\r\nb") == "50%25 a%0D%0Ab"
    assert escape.workflow_message("%0A") == "%250A"  # a literal %0A survives the runner
    assert escape.workflow_property("rsa[a,b::c%]\n") == "rsa[a%2Cb%3A%3Ac%25]%0A"
    for raw in ("%0A%25", "a\r\n,b::c", "%3A%2C:,"):
        assert unescape_data(escape.workflow_message(raw)) == raw
        assert unescape_property(escape.workflow_property(raw)) == raw


@pytest.mark.parametrize(
    ("raw", "cell"),
    [
        ("a|b", "a\\|b"),
        ("<b>x</b>", "&lt;b&gt;x&lt;/b&gt;"),
        ("a\\|b", "a\\\\\\|b"),
        ("`x`", "\\`x\\`"),
        ("&amp;", "&amp;amp;"),
        ("a\nb\x1b", "a\\\\nb\\\\x1b"),
        ("rsa[a_b]", "rsa[a_b]"),
    ],
)
def test_markdown_cell(raw, cell):
    assert escape.markdown_cell(raw) == cell


@pytest.mark.parametrize(
    ("raw", "span"),
    [
        ("ckpt/a", "`ckpt/a`"),
        ("a`b", "``a`b``"),
        ("`a", "`` `a ``"),
        ("a``b`", "``` a``b` ```"),
        (" a", "`  a `"),
        ("a\nb|<i>", "`a\\nb|<i>`"),
    ],
)
def test_markdown_code(raw, span):
    assert escape.markdown_code(raw) == span


def test_xml_text():
    assert escape.xml_text("\x00a\x0b\x0c\x1b") == "\\x00a\\x0b\\x0c\\x1b"
    assert escape.xml_text("\ufffe\uffff\ud800") == "\\ufffe\\uffff\\ud800"  # forbidden
    assert escape.xml_text("\x7f\x85\u202e") == "\\x7f\\x85\\u202e"  # discouraged, bidi
    kept = "\t\n\r<&>\"' é\U0001f600"  # ElementTree escapes &<>
    assert escape.xml_text(kept) == kept
    element = ET.Element("case", name=escape.xml_text("\x1b<b>\x00"))
    assert ET.fromstring(ET.tostring(element)).get("name") == "\\x1b<b>\\x00"


def test_json_text_keeps_the_names():
    names = ["<a_4>\ud800", "<a_5>##[warning]x", "\x1b", "\x85\u202e\u2028é"]
    text = escape.json_text(json.dumps(names, ensure_ascii=False))
    assert text == (
        '["<a_4>\\ud800", "<a_5>##\\u005bwarning]x", "\\u001b", "\\u0085\\u202e\\u2028é"]'
    )
    assert json.loads(text) == names
    text.encode("utf-8")


def test_html_page_and_figure_text():
    page = "<p>\x1b\ud800\x7f\u202e\t\n\x0c\r</p>"
    assert escape.html_page(page) == "<p>\\x1b\\ud800\\x7f\\u202e\t\n\x0c\r</p>"
    assert escape.figure_text("a$\\frac$\x1b\ud800") == "a$\\frac$\\x1b\\ud800"


def test_tsv_field():
    assert escape.tsv_field("a\\b\tc\nd\re\ud800") == "a\\\\b\\tc\\nd\\re\\ud800"


def test_unexpected_error_line_is_escaped(capsys):
    print_unexpected(ValueError("token '\x1b[2J' \u202e"))
    err = capsys.readouterr().err
    assert err == (
        "error: unexpected ValueError: token '\\x1b[2J' \\u202e "
        "(a bug in geodiag; rerun with GEODIAG_DEBUG=1 for the traceback)\n"
    )
