"""The terminal's lines (issue 42): wrapped to its width with a hanging indent and the
statuses in colour on a terminal only; whole and plain when piped; repeated phrases said
once; a summary over several checkpoints; --quiet."""

from __future__ import annotations

import io
import os
import pty
import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from geodiag.cli import app
from geodiag.outputs.console import Console, paint, wrap

runner = CliRunner()
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


LONG = "    [fail] n_untrained 19 > 0: " + ", ".join(f"<a_{i}> (2 item IDs)" for i in range(30))


def test_wrap_hangs_under_the_tag_and_keeps_every_word():
    pieces = wrap(LONG, 80)
    assert len(pieces) > 1 and all(len(p) <= 80 for p in pieces)
    assert pieces[0].startswith("    [fail] ")
    assert all(p.startswith(" " * 11) and p[11] != " " for p in pieces[1:])
    assert " ".join(p.strip() for p in pieces) == LONG.strip()  # nothing lost or split
    assert wrap(LONG, None) == [LONG] and wrap("short", 80) == ["short"]
    # A label hangs too ("verdict: "); a word longer than the width is left whole.
    verdict = wrap("  verdict: " + "word " * 30, 60)
    assert all(p.startswith(" " * 11) for p in verdict[1:])
    assert wrap("  x " + "y" * 100, 40)[-1].strip() == "y" * 100


def test_a_name_from_a_file_cannot_start_a_continuation_line_as_a_command():
    # Escaped once already (geodiag.escape.terminal), a name holding "::" mid-line would
    # begin a line of its own after the wrap: the piece is escaped again.
    line = "    [fail] n_untrained 1 > 0: " + "x" * 60 + " ::error::INJECTED"
    pieces = wrap(line, 80)
    assert not any(p.lstrip().startswith("::") for p in pieces)
    assert pieces[-1].strip() == "\\x3a:error::INJECTED"


def test_only_geodiags_own_words_are_painted():
    assert (
        ANSI.sub("", paint("    [fail] rsa[a] 0.1: <[fail]>")) == "    [fail] rsa[a] 0.1: <[fail]>"
    )
    assert paint("    [fail] x: <[fail]>").count("\x1b[31m") == 1
    assert paint("ckpt: PASS") == "ckpt: \x1b[32mPASS\x1b[0m"
    assert paint("1 of 2 failed: ckpt-mean").startswith("\x1b[31m1 of 2 failed\x1b[0m")
    assert paint("all 2 passed").startswith("\x1b[32m")
    assert paint("  note: a: FAIL") == "  note: a: FAIL"  # an indented line is no header


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_console_of_a_pipe_a_terminal_and_no_color(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert Console.of(io.StringIO()) == Console(None, False)
    assert Console.of(_Tty()) == Console(80, True)
    assert Console.of(_Tty(), no_color=True) == Console(80, False)
    monkeypatch.setenv("NO_COLOR", "1")
    assert Console.of(_Tty()) == Console(80, False)
    monkeypatch.setenv("NO_COLOR", "")  # set but empty: no-color.org says colour stays
    assert Console.of(_Tty()) == Console(80, True)


def _on_a_terminal(args: list[str], env: dict) -> str:
    """geodiag's stdout on a pseudo-terminal 80 columns wide."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "geodiag.cli", *args],
        stdout=follower,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "80", **env},
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # the follower closed: Linux reports EIO
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(leader)
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_on_a_terminal_wrapped_and_coloured_piped_whole_and_plain(make_ckpt):
    mean = make_ckpt("mean")
    args = ["check", str(mean), "--permutations", "10"]
    env = {k: "" for k in ("NO_COLOR", "GITHUB_ACTIONS")}
    tty = _on_a_terminal(args, env)
    assert "\x1b[31m[fail]\x1b[0m" in tty and "\x1b[31mFAIL\x1b[0m" in tty
    plain = ANSI.sub("", tty).splitlines()
    assert max(map(len, plain)) <= 80
    piped = run(*args).stdout
    assert "\x1b" not in piped
    assert max(map(len, piped.splitlines())) > 200  # one finding per line, as it was
    # The same words either way: only the layout and the colour differ.
    assert " ".join(" ".join(plain).split()) == " ".join(piped.split())
    no_color = _on_a_terminal([*args, "--no-color"], env)
    assert "\x1b" not in no_color and ANSI.sub("", tty) == no_color
    assert "\x1b" not in _on_a_terminal(args, {**env, "NO_COLOR": "1"})


def test_several_checkpoints_end_with_a_summary_and_quiet_keeps_the_failures(make_ckpt):
    mean, grounded = make_ckpt("mean"), make_ckpt("grounded")
    res = run("check", mean, grounded, "--permutations", 50)
    assert res.exit_code == 1
    assert res.stdout.splitlines()[-1] == f"1 of 2 failed: {mean}"
    both = run("check", grounded, grounded, "--permutations", 50)
    assert both.exit_code == 0 and both.stdout.splitlines()[-1] == "all 2 passed"
    one = run("check", grounded, "--permutations", 50)  # one checkpoint: its header says it
    assert "passed" not in one.stdout.splitlines()[-1]
    quiet = run("check", mean, grounded, "--permutations", 50, "-q")
    assert quiet.exit_code == 1
    lines = quiet.stdout.splitlines()
    assert lines[0] == f"{mean}: FAIL" and str(grounded) not in "\n".join(lines[:-1])
    tags = [ln.split("]")[0].strip() for ln in lines if ln.strip().startswith("[")]
    assert tags and set(tags) == {"[fail"}
    assert lines[-2].startswith("  verdict: ") and lines[-1] == f"1 of 2 failed: {mean}"
    assert run("check", grounded, "--permutations", 50, "--quiet").stdout == "all 1 passed\n"


def test_missing_codebooks_said_once_per_checkpoint_never_undefined(make_ckpt):
    ckpt = make_ckpt("grounded", with_codebooks=False)
    out = run("check", ckpt, "--permutations", 10).stdout
    skipped = [ln for ln in out.splitlines() if "[skip]" in ln]
    assert skipped == [
        "    [skip] rsa[a], rsa[b], rsa[c] not measured: no codebooks (none beside the "
        "checkpoint as codebooks.safetensors; --codebooks FILE gives them)"
    ]
    assert out.count("--codebooks FILE") == 1 and "undefined" not in out
    (verdict,) = [ln for ln in out.splitlines() if ln.startswith("  verdict: ")]
    assert verdict.endswith("structure against the codebooks not measured: no codebooks.")
    metrics = run("metrics", ckpt, "--permutations", 10).stdout
    assert metrics.count("--codebooks FILE") == 1 and "undefined (no codebooks" not in metrics


@pytest.mark.parametrize("kind", ["mean", "mean-noise"])
def test_identical_rows_name_their_tolerance(make_ckpt, kind):
    import json

    ckpt = make_ckpt(kind)
    data = json.loads(run("metrics", ckpt, "--permutations", 10, "--json").stdout)
    tol = data["matrices"][0]["untrained"]["tolerance"]
    shown = f"{tol:.2g}"
    assert f"24 rows identical within {shown}:" in run("metrics", ckpt, "--permutations", 10).stdout
    assert f"1 group(s) of rows identical within {shown}" in run("check", ckpt).stdout
