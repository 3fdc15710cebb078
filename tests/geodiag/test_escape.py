"""Names from files, escaped for each place geodiag writes them (geodiag.escape): each rule
against hand-computed cases, then hostile checkpoints through every output of the CLI,
checked with references of their own (unicodedata, a model of the GitHub runner's command
parser, a GFM pipe counter, XML 1.0's Char production, json and ElementTree)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import unicodedata
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from geodiag_fixtures import (
    HOSTILE_LEVELS,
    HOSTILE_TOKENS,
    write_hostile_sidecar_checkpoint,
    write_hostile_tokenizer_checkpoint,
)
from typer.testing import CliRunner

from geodiag import escape
from geodiag.cli import app
from geodiag.errors import print_unexpected

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
BIDI_CONTROLS = {"LRE", "RLE", "PDF", "LRO", "RLO", "LRI", "RLI", "FSI", "PDI"}


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
    assert escape.figure_text("a$\\frac$\x1b\ud800") == "a\\$\\frac\\$\\x1b\\ud800"


def test_tsv_field():
    assert escape.tsv_field("a\\b\tc\nd\re\ud800") == "a\\\\b\\tc\\nd\\re\\ud800"


def test_unexpected_error_line_is_escaped(capsys):
    print_unexpected(ValueError("token '\x1b[2J' \u202e"))
    err = capsys.readouterr().err
    assert err == (
        "error: unexpected ValueError: token '\\x1b[2J' \\u202e "
        "(a bug in geodiag; rerun with GEODIAG_DEBUG=1 for the traceback)\n"
    )


# --- hostile checkpoints through the CLI -------------------------------------------------

# A folder name is data too (a glob in the Action matches what a pull request added).
HOSTILE_FOLDER = "ck\n::error::PATH`|<b>p</b>\x1b[2J"


def raw_controls(text: str) -> list[str]:
    """Characters no stream may carry raw: controls (but the newline between lines),
    surrogates, line separators, bidi embeddings, overrides and isolates."""
    return [
        ch
        for ch in text
        if ch != "\n"
        and (
            unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp")
            or unicodedata.bidirectional(ch) in BIDI_CONTROLS
        )
    ]


def runner_commands(stream: str) -> list[tuple[str, dict[str, str], str]]:
    """(command, properties, data) of every workflow command the GitHub runner would run
    from ``stream``: a model of actions/runner ActionCommand.TryParseV2 (``::`` after
    leading whitespace) and, stricter than it, any legacy ``##[`` at all."""
    found = []
    for line in stream.splitlines():  # splits at more than the runner does: stricter
        assert "##[" not in line, line
        message = line.lstrip()
        end = message.find("::", 2)
        if not message.startswith("::") or end < 0:
            continue
        info = message[2:end]
        name, _, props = info.partition(" ")
        properties = {}
        for prop in filter(None, props.strip().split(",")):
            key, _, value = prop.partition("=")
            properties[key] = unescape_property(value)
        found.append((name, properties, unescape_data(message[end + 2 :])))
    return found


def gfm_pipes(row: str) -> int:
    """Unescaped pipes of a GFM table row (cmark-gfm: a backslash escapes the next character)."""
    count, i = 0, 0
    while i < len(row):
        if row[i] == "\\":
            i += 2
            continue
        count += row[i] == "|"
        i += 1
    return count


def xml_chars_only(text: str) -> bool:
    """XML 1.0's Char production (section 2.2), written out."""
    return all(
        c in (0x9, 0xA, 0xD)
        or 0x20 <= c <= 0xD7FF
        or 0xE000 <= c <= 0xFFFD
        or 0x10000 <= c <= 0x10FFFF
        for c in map(ord, text)
    )


def strict_json(text: str):
    def no_constants(name):
        raise ValueError(f"non-strict JSON constant {name}")

    return json.loads(text, parse_constant=no_constants)


def strings_in(obj) -> set[str]:
    if isinstance(obj, str):
        return {obj}
    if isinstance(obj, dict):
        return set().union(set(obj), *map(strings_in, obj.values()))
    if isinstance(obj, list):
        return set().union(*map(strings_in, obj))
    return set()


BUILDERS = {
    "tokenizer": write_hostile_tokenizer_checkpoint,
    "sidecar": write_hostile_sidecar_checkpoint,
}


@pytest.fixture(params=sorted(BUILDERS))
def hostile(request, tmp_path):
    return request.param, BUILDERS[request.param](tmp_path / HOSTILE_FOLDER)


def assert_safe_streams(res, annotations: int = 0) -> None:
    """stdout and stderr carry no raw control, and the runner finds no command in them
    but ``annotations`` of geodiag's own ``::error`` lines, each with a title only."""
    assert not raw_controls(res.stdout) and not raw_controls(res.stderr)
    assert runner_commands(res.stdout) == []
    commands = runner_commands(res.stderr)
    assert len(commands) == annotations
    for name, properties, _ in commands:
        assert name == "error" and list(properties) == ["title"]
        assert properties["title"].startswith("geodiag ")


def test_check_outputs_under_github_actions(hostile, tmp_path):
    kind, ckpt = hostile
    summary, junit = tmp_path / "summary.md", tmp_path / "gate.xml"
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
    args = ["check", str(ckpt), "--min-rsa", "0.5", "--permutations", "10"]
    res = runner.invoke(app, [*args, "--junit", str(junit)], env=env)
    assert res.exit_code == 1, res.output
    checks = strict_json(runner.invoke(app, [*args, "--json"]).stdout)["results"][0]["checks"]
    failed = [c for c in checks if c["status"] == "fail"]
    assert_safe_streams(res, annotations=len(failed))
    titles = [p["title"] for _, p, _ in runner_commands(res.stderr)]
    if kind == "sidecar":
        assert titles[-3:] == [
            "geodiag rsa[a\\n::warning::LEVEL]",
            "geodiag rsa[::stop-commands::b]",
            "geodiag rsa[c|<i>x</i>,d:`e`\\x1b[2J$\\notacommand$]",
        ]
        # the true names, in the JSON
        assert [c["name"] for c in failed[-3:]] == [f"rsa[{lv}]" for lv in HOSTILE_LEVELS]
    else:
        assert "<a_0>\\n::error file=x,line=1::INJECTED" in res.stdout

    text = summary.read_text(encoding="utf-8")
    assert not raw_controls(text)
    lines = [line for line in text.splitlines() if line]
    # One heading (the path in a code span, where nothing is markup) and the table, with
    # five cells on every row and no HTML.
    heading = re.fullmatch(r"### geodiag check (`+)(.+)\1: FAILED", lines[0])
    assert heading and "`" * len(heading[1]) not in heading[2]
    rows = [line for line in lines[1:] if line.startswith("|")]
    assert len(rows) == 2 + len(checks) and all(gfm_pipes(row) == 6 for row in rows)
    # The verdict above the table, then one line per failing or warning check, each
    # escaped as a cell's text.
    verdict, *said = [line for line in lines[1:] if not line.startswith("|")]
    assert lines[1] == verdict and gfm_pipes(verdict) == 0 and "<" not in verdict
    warned = [c for c in checks if c["status"] in ("fail", "warn")]
    assert len(said) == len(warned) and all(line.startswith("- ") for line in said)
    assert all(gfm_pipes(line) == 0 for line in said)
    assert "<" not in "".join(rows + said)

    data = junit.read_bytes()
    assert xml_chars_only(data.decode("utf-8"))
    suite = ET.fromstring(data).find("testsuite")
    cases = suite.findall("testcase")
    assert len(cases) == len(checks) and int(suite.get("failures")) == len(failed)
    assert suite.get("name") == "geodiag check " + str(ckpt).replace("\x1b", "\\x1b")


@pytest.mark.parametrize("command", ["metrics", "drift"])
def test_text_tables_are_safe(hostile, command):
    _, ckpt = hostile
    paths = [ckpt, ckpt] if command == "drift" else [ckpt]
    res = runner.invoke(
        app, [command, *map(str, paths), "--permutations", "10"], env={"GITHUB_ACTIONS": "true"}
    )
    assert res.exit_code == 0, res.output
    assert_safe_streams(res)


@pytest.mark.parametrize("command", ["metrics", "check"])
def test_json_is_strict_and_keeps_the_true_names(hostile, command):
    kind, ckpt = hostile
    res = runner.invoke(app, [command, str(ckpt), "--json", "--permutations", "10"])
    assert res.exit_code == (0 if command == "metrics" else 1), res.output
    assert_safe_streams(res)
    names = strings_in(strict_json(res.stdout))
    if kind == "sidecar":
        assert {f"rsa[{lv}]" for lv in HOSTILE_LEVELS} <= names or command == "metrics"
        assert set(HOSTILE_LEVELS) <= names or command == "check"
    else:
        assert set(HOSTILE_TOKENS) <= names or command == "check"
        assert str(ckpt) in names


def test_report_escapes_names_in_the_page_and_figures(hostile, tmp_path):
    pytest.importorskip("matplotlib")
    pytest.importorskip("jinja2")
    kind, ckpt = hostile
    out = tmp_path / "out" / "r.html"
    res = runner.invoke(app, ["report", str(ckpt), "-o", str(out), "--permutations", "10"])
    assert res.exit_code == 0, res.output
    assert_safe_streams(res)
    html = out.read_text(encoding="utf-8")
    # the page's own <b> and <i> stay; the names' are text
    assert "<b>x</b>" not in html and "<i>x</i>" not in html and "<b>p</b>" not in html
    assert "&lt;b&gt;p&lt;/b&gt;" in html
    assert ("&lt;i&gt;x&lt;/i&gt;" if kind == "sidecar" else "&lt;b&gt;x&lt;/b&gt;") in html
    assert not [ch for ch in raw_controls(html) if ch not in "\t\x0c\r"]
    data = strict_json(out.with_suffix(".json").read_text(encoding="utf-8"))
    expected = set(HOSTILE_LEVELS) if kind == "sidecar" else set(HOSTILE_TOKENS)
    assert expected <= strings_in(data)


def test_bad_input_error_line_is_escaped(tmp_path):
    ckpt = write_hostile_sidecar_checkpoint(tmp_path / "ck")
    path = ckpt / "semantic_ids.json"
    sids = json.loads(path.read_text())
    sids["levels"][0]["size"] = 0
    path.write_text(json.dumps(sids))
    res = runner.invoke(app, ["check", str(ckpt)], env={"GITHUB_ACTIONS": "true"})
    assert res.exit_code == 2
    assert_safe_streams(res)
    assert res.stderr == (
        f"error: {path}: levels[0] ('a\\n::warning::LEVEL') needs a positive integer 'size'\n"
    )


def test_check_writes_safe_bytes_from_a_real_process(tmp_path):
    """The bytes a CI log gets: a subprocess, not CliRunner's capture."""
    ckpt = write_hostile_tokenizer_checkpoint(tmp_path / HOSTILE_FOLDER)
    env = {**os.environ, "GITHUB_ACTIONS": "true", "PYTHONPATH": str(ROOT)}
    res = subprocess.run(
        [sys.executable, "-m", "geodiag.cli", "check", str(ckpt), "--permutations", "10"],
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert res.returncode == 1, res.stderr
    for stream in (res.stdout, res.stderr):
        assert not [b for b in stream if b < 0x20 and b != 0x0A or b == 0x7F]
        stream.decode("utf-8")  # strict: a lone surrogate could not have been written
    assert len(runner_commands(res.stderr.decode("utf-8"))) == 4


def test_scan_is_safe_in_text_and_json(hostile):
    """`geodiag scan` prints the checkpoint's path and token names read from its files."""
    _, ckpt = hostile
    text = runner.invoke(app, ["scan", str(ckpt)], env={"GITHUB_ACTIONS": "true"})
    assert text.exit_code == 0, text.output
    assert_safe_streams(text)
    assert "\\x1b" in text.stdout  # the path's escape, shown, not sent
    res = runner.invoke(app, ["scan", str(ckpt), "--json"])
    assert res.exit_code == 0, res.output
    assert_safe_streams(res)
    strict_json(res.stdout)
