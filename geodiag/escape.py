"""Text from files, made safe for where geodiag writes it: one function per sink.

Token strings, level names, provenance keys, tensor names and paths are data from
whoever made the checkpoint. Each sink gives some characters a meaning (a terminal
runs ``ESC [``, the GitHub runner runs a line that starts with ``::``, XML 1.0 forbids
most C0 controls, a markdown table splits on ``|``), so each output escapes them where it
is written, never where the names are read: the JSON keeps the true names.

The escapes here are for reading, not for reversing: a name that holds a backslash
followed by ``x1b`` is shown like one holding ESC. The JSON output is the exact record.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# Shown as escapes by every sink: DEL and the C1 controls (0x9b is a terminal's CSI); the
# line and paragraph separators (str.splitlines ends a line there); the bidi embeddings,
# overrides and isolates, which reorder what a reader sees ("Trojan Source",
# CVE-2021-42574); lone surrogates, which UTF-8 cannot encode (a tokenizer.json may hold
# "\ud800", and writing it would stop the output). Each sink adds the C0 controls it
# cannot carry.
_EVERYWHERE = "\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_CONTROL = re.compile(f"[\x00-\x1f{_EVERYWHERE}]")  # terminal: every C0 control too
# XML 1.0 forbids C0 controls but tab, LF and CR, surrogates, U+FFFE and U+FFFF (its Char
# production, section 2.2); it discourages DEL and C1.
_NOT_XML = re.compile(f"[\x00-\x08\x0b\x0c\x0e-\x1f{_EVERYWHERE}\ufffe\uffff]")
# The HTML parser reports controls other than ASCII whitespace (tab, LF, FF, CR),
# surrogates and noncharacters as input-stream errors (WHATWG HTML 13.2.3.5).
_NOT_HTML = re.compile(f"[\x00-\x08\x0b\x0e-\x1f{_EVERYWHERE}\ufffe\uffff]")
_NOT_JSON = re.compile(f"[{_EVERYWHERE}]")  # json.dumps escapes C0 itself
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
_MARKDOWN = {"\\": "\\\\", "|": "\\|", "`": "\\`", "&": "&amp;", "<": "&lt;", ">": "&gt;"}
_MARKDOWN_SPECIAL = re.compile(r"[\\|`&<>]")


def _shown(ch: str) -> str:
    """One character as Python's repr writes it inside a string: ``\\n``, ``\\x1b``,
    ``\\u202e``."""
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _controls_shown(text: str) -> str:
    return _CONTROL.sub(lambda m: _shown(m.group()), text)


def terminal(text: str) -> str:
    """``text`` as one line (or part of one) that a terminal, and the GitHub runner
    reading the CI log, show and do not obey.

    Rules:
    - every C0 control (tab and newline included), DEL, every C1 control, U+2028 and
      U+2029, the bidi controls U+202A-U+202E and U+2066-U+2069, and lone surrogates
      are written as Python's repr writes them (``\\n``, ``\\x1b``, ``\\u202e``,
      ``\\ud800``); printable Unicode of any script, zero-width joiners and
      backslashes are left as they are;
    - the runner reads stdout and stderr line by line and runs a workflow command from
      a line that starts with ``::`` after its leading whitespace (``TryParseV2`` in
      actions/runner src/Runner.Common/ActionCommand.cs), or from a legacy ``##[``
      anywhere in it (``TryParse``, tried next by ``ActionCommandManager``). So a text
      that would start so has its first colon written ``\\x3a``, and ``##[`` is written
      ``##\\x5b``. geodiag's own lines never start with ``::`` (its annotations are
      written whole, not through here), so only a name from a file is changed.

    Applying it twice changes nothing.
    """
    shown = _controls_shown(text).replace("##[", "##\\x5b")
    body = shown.lstrip()
    if body.startswith("::"):
        shown = shown[: len(shown) - len(body)] + "\\x3a" + body[1:]
    return shown


def terminal_lines(lines: Iterable[str]) -> str:
    """Lines for a terminal, each through :func:`terminal` and joined with newlines: the
    only line breaks are the ones between ``lines``, so a name cannot start a line."""
    return "\n".join(terminal(line) for line in lines)


def workflow_message(text: str) -> str:
    """The message of a GitHub workflow command (``::error title=T::MESSAGE``).

    Rule: actions/toolkit's ``escapeData`` (packages/core/src/command.ts), which the
    runner undoes (``UnescapeData`` in actions/runner ActionCommand.cs): ``%`` -> ``%25``,
    ``\\r`` -> ``%0D``, ``\\n`` -> ``%0A``, in that order. The message then holds no line
    break, so nothing in it starts a line. (The command goes to a terminal too: pass the
    text through :func:`terminal` first, which already shows line breaks as ``\\n``.)
    """
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def workflow_property(text: str) -> str:
    """A property value of a GitHub workflow command (``title=VALUE``).

    Rule: actions/toolkit's ``escapeProperty``: :func:`workflow_message`'s three, then
    ``:`` -> ``%3A`` (a ``::`` would end the properties) and ``,`` -> ``%2C`` (a comma
    would start another property, ``file=`` or ``line=``).
    """
    return workflow_message(text).replace(":", "%3A").replace(",", "%2C")


def markdown_cell(text: str) -> str:
    """Text of a GitHub-flavoured markdown table cell (or any inline text), shown as is.

    Rule: controls shown as :func:`terminal` shows them (one line), then ``\\`` ->
    ``\\\\`` (so no escape below can be undone), ``|`` -> ``\\|`` (GFM's escaped pipe:
    the cell does not split), a backtick -> ``\\``` (no code span starts), and ``&``,
    ``<``, ``>`` as the entities ``&amp;`` ``&lt;`` ``&gt;`` (no HTML tag, comment or
    entity, which GitHub would render). Emphasis characters and bare URLs are left: at
    worst italics or a link, never a broken table or markup.
    """
    return _MARKDOWN_SPECIAL.sub(lambda m: _MARKDOWN[m.group()], _controls_shown(text))


def markdown_code(text: str) -> str:
    """A markdown code span showing ``text`` literally (a path in a heading).

    Rule (CommonMark 0.31.2, https://spec.commonmark.org/0.31.2/#code-spans): controls
    shown as :func:`terminal` shows them (a line break would end the heading); the
    fence is one backtick longer than the longest run of backticks inside, so none of
    them closes it; a space pads each side when the text starts or ends with a backtick
    or a space (the renderer strips one from each side). Inside a code span nothing else
    is markup. Not for table cells, where GFM still splits on ``|``: use
    :func:`markdown_cell`.
    """
    shown = _controls_shown(text)
    runs = re.findall("`+", shown)
    fence = "`" * (max((len(r) for r in runs), default=0) + 1)
    if shown.strip(" ") and (shown[0] in "` " or shown[-1] in "` "):
        shown = f" {shown} "
    return f"{fence}{shown}{fence}"


def xml_text(text: str) -> str:
    """Text or an attribute value for an XML 1.0 document (JUnit).

    Rule: each character XML 1.0 forbids (its Char production: C0 controls other than
    tab, LF and CR; U+FFFE, U+FFFF; lone surrogates) or discourages (DEL, C1), and the
    separators and bidi controls :func:`terminal` shows, is written as it writes them
    (``\\x1b``, ``\\ufffe``). ``&``, ``<``, ``>`` and quotes are left to the serializer
    (ElementTree escapes them).
    """
    return _NOT_XML.sub(lambda m: _shown(m.group()), text)


def figure_text(text: str) -> str:
    """A label matplotlib draws into a report figure (a level name on an axis, a
    checkpoint's label in a legend or title).

    Rule: the characters :func:`terminal` escapes are written as it writes them:
    matplotlib has no glyph for a control (it warns on stderr, quoting the raw
    character), an SVG figure holding one is not XML, and a lone surrogate cannot be
    written at all. A dollar sign is written ``\\$``, matplotlib's escape for a literal
    one: mathtext stays on for the axes (a log axis labels its ticks ``$10^{-3}$``), and
    a name never opens math (``$\\frac{a}{b}$`` is drawn as typed; an unknown command in
    one stopped the report).
    """
    return _controls_shown(text).replace("$", "\\$")


def tsv_field(text: str) -> str:
    """One cell of a tab-separated file (the Embedding Projector's metadata.tsv).

    Rule: backslash, tab, CR and newline as ``\\\\``, ``\\t``, ``\\r``, ``\\n``, so the
    cell stays one cell of one row and a reader can undo it; the other characters
    :func:`terminal` shows (a lone surrogate, which UTF-8 cannot encode, among them) as
    it shows them (``\\ud800``).
    """
    text = text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
    return _controls_shown(text.replace("\r", "\\r"))


def json_text(document: str) -> str:
    """A JSON document made by ``json.dumps(..., ensure_ascii=False)``, writable as UTF-8
    and printable to a terminal or a CI log, that decodes to the same names.

    Rules (json.dumps has escaped every C0 control; what follows can only occur inside a
    JSON string, where a ``\\uXXXX`` escape is the character itself):
    - DEL, C1 controls, U+2028, U+2029, the bidi controls and lone surrogates (a name
      read from a JSON file that held ``"\\ud800"``) are written as ``\\uXXXX``;
    - ``##[`` is written ``##\\u005b``: the GitHub runner runs a legacy workflow
      command from ``##[`` anywhere in a line (see :func:`terminal`). A JSON line
      cannot start with ``::`` (it starts with a bracket, a brace or a quote).
    """
    text = _NOT_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", document)
    return text.replace("##[", "##\\u005b")


def html_page(page: str) -> str:
    """A rendered HTML page, valid and writable as UTF-8. Markup in names is escaped by
    the template (jinja2 autoescape); this handles what autoescape leaves.

    Rule: each character the HTML parser reports as an input-stream error (C0 controls
    other than tab, LF, FF and CR; DEL; C1 controls; lone surrogates, which UTF-8 cannot
    encode; U+FFFE and U+FFFF), and the separators and bidi controls :func:`terminal`
    shows, is written as text the way it shows them (``\\x1b``, ``\\u202e``). The
    template itself holds none of them.
    """
    return _NOT_HTML.sub(lambda m: _shown(m.group()), page)
