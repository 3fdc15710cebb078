"""Exit 1 means one thing: the gate failed. Everything else that stops a run (an output
that cannot be written, an input that cannot be read or parsed, a bug) exits 2 with one
``error: <file>: <problem>`` line on stderr, no traceback, and no half-written file; a
reader that closes stdout early does not change the verdict's code.

Run as root, chmod cannot make a path unwritable: these tests use a regular file where a
folder must be, a folder where a file must be, and /proc (which takes no new files).
"""

import os
import shlex
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import geodiag.analysis.checkpoint
from geodiag import cli
from geodiag.cli import app

REPO = Path(__file__).resolve().parents[2]
DEEP_JSON = "[" * 100_000 + "]" * 100_000  # past any recursion limit of json's decoder


def run(*args, env=None):
    env = {"GITHUB_STEP_SUMMARY": None, "GITHUB_ACTIONS": None, **(env or {})}
    return CliRunner().invoke(app, [str(a) for a in args], env=env)


def error_line(res, name: str | Path, *, only_line: bool = True) -> str:
    """The run's one error line, which must name ``name``; asserts exit 2, no traceback.
    ``only_line=False`` allows progress lines before it (report)."""
    assert res.exit_code == 2, (res.exit_code, res.output, res.exception)
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and errors[0] == lines[-1], lines
    if only_line:
        assert len(lines) == 1, lines
    assert errors[0].startswith(f"error: {name}: "), (errors[0], str(name))
    return errors[0]


def files_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture
def a_file(tmp_path) -> Path:
    """A regular file, to stand where a folder must be."""
    path = tmp_path / "a_file"
    path.write_text("not a folder")
    return path


# --- outputs that cannot be written ------------------------------------------------


@pytest.mark.parametrize("kind", ["random", "mean"])  # the gate passes / fails
@pytest.mark.parametrize("where", ["parent is a file", "is a folder", "in /proc"])
def test_unwritable_junit_exits_2_whatever_the_verdict(make_ckpt, tmp_path, a_file, kind, where):
    ckpt = make_ckpt(kind)
    junit = {
        "parent is a file": a_file / "junit.xml",
        "is a folder": tmp_path / "junit_dir",
        "in /proc": Path("/proc/geodiag-junit.xml"),
    }[where]
    if where == "is a folder":
        junit.mkdir()
    before = files_in(tmp_path)
    res = run("check", ckpt, "--permutations", 10, "--junit", junit)
    line = error_line(res, junit)
    assert "cannot write" in line
    if where == "parent is a file":
        assert f"{a_file} is a file, not a folder" in line
    assert res.stdout == ""  # the verdict is not printed as if the run had finished
    assert files_in(tmp_path) == before  # no temporary sibling left
    assert a_file.read_text() == "not a folder"


@pytest.mark.parametrize("where", ["parent is a file", "is a folder"])
def test_unwritable_step_summary_exits_2(make_ckpt, tmp_path, a_file, where):
    summary = a_file / "summary.md" if where == "parent is a file" else tmp_path
    res = run(
        "check",
        make_ckpt("random"),
        "--permutations",
        10,
        env={"GITHUB_STEP_SUMMARY": str(summary)},
    )
    assert "GITHUB_STEP_SUMMARY" in error_line(res, summary)


def test_unwritable_report_output_exits_2_and_writes_nothing(make_ckpt, tmp_path, a_file):
    ckpt = make_ckpt("random")
    out = a_file / "report.html"
    line = error_line(run("report", ckpt, "--permutations", 10, "-o", out), out, only_line=False)
    assert "is a file, not a folder" in line
    # NAME.json is a folder: the HTML must not be published alone.
    out_dir = tmp_path / "out"
    (out_dir / "report.json").mkdir(parents=True)
    res = run("report", ckpt, "--permutations", 10, "-o", out_dir / "report.html")
    error_line(res, out_dir / "report.json", only_line=False)
    assert files_in(out_dir) == ["report.json"]


@pytest.mark.parametrize("where", ["parent is a file", "json is a folder", "in /proc"])
def test_report_output_is_checked_before_the_analysis(make_ckpt, tmp_path, a_file, where):
    """An output that cannot be written fails at once: no checkpoint is read first."""
    ckpt = make_ckpt("random")
    out = {
        "parent is a file": a_file / "report.html",
        "json is a folder": tmp_path / "out" / "report.html",
        "in /proc": Path("/proc/geodiag-report.html"),
    }[where]
    if where == "json is a folder":
        (out.parent / "report.json").mkdir(parents=True)
    named = out.with_suffix(".json") if where == "json is a folder" else out
    # The error is the only line: no "reading" or "analyzing" progress before it.
    error_line(run("report", ckpt, "--permutations", 10, "-o", out), named)


def test_unwritable_projector_output_exits_2_and_writes_nothing(make_ckpt, tmp_path, a_file):
    ckpt = make_ckpt("random")
    line = error_line(run("export-projector", ckpt, "-o", a_file), a_file / "vectors.tsv")
    assert f"{a_file} is a file, not a folder" in line
    out = tmp_path / "proj"
    (out / "metadata.tsv").mkdir(parents=True)  # one of its files is a folder
    error_line(run("export-projector", ckpt, "-o", out), out / "metadata.tsv")
    assert files_in(out) == ["metadata.tsv"]


# --- inputs that cannot be read ----------------------------------------------------


def _replace(path: Path, how: str) -> None:
    path.unlink()
    if how == "symlink loop":
        path.symlink_to(path.name)
    else:
        path.mkdir()


@pytest.mark.parametrize("how", ["symlink loop", "a folder"])
def test_unreadable_weights_in_a_folder(make_ckpt, how):
    ckpt = make_ckpt("random")
    weights = ckpt / "model.safetensors"
    _replace(weights, how)
    line = error_line(run("check", ckpt, "--permutations", 10), weights)
    reason = "Too many levels of symbolic links" if how == "symlink loop" else "Is a directory"
    assert line.endswith(f"cannot read ({reason})")


def test_weights_file_that_is_a_symlink_loop(tmp_path):
    loop = tmp_path / "model.safetensors"
    loop.symlink_to(loop.name)
    line = error_line(run("check", loop), loop)  # was "no such file or folder"
    assert "Too many levels of symbolic links" in line


def test_weights_name_too_long(tmp_path):
    path = tmp_path / ("w" * 300 + ".safetensors")
    assert "too long" in error_line(run("metrics", path), path)


@pytest.mark.parametrize("flag", ["--config", "--codebooks"])
def test_an_input_flag_naming_a_folder(make_ckpt, tmp_path, flag):
    folder = tmp_path / "a_folder"
    folder.mkdir()
    res = run("check", make_ckpt("random"), "--permutations", 10, flag, folder)
    assert "Is a directory" in error_line(res, folder)


# --- inputs nested past the parser's recursion limit --------------------------------


def _deep_header(path: Path) -> None:
    header = DEEP_JSON.encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header)


@pytest.mark.parametrize(
    "name",
    [
        "model.safetensors",
        "tokenizer.json",
        "config.json",
        "semantic_ids.json",
        "model.safetensors.index.json",
    ],
)
def test_deeply_nested_json_is_bad_input(make_ckpt, name):
    ckpt = make_ckpt(
        "random", with_sidecar=name != "tokenizer.json", sharded=name.endswith("index.json")
    )
    path = ckpt / name
    if name == "model.safetensors":
        _deep_header(path)
    else:
        path.write_text(DEEP_JSON)
    line = error_line(run("check", ckpt, "--permutations", 10), path)
    assert "nested too deeply" in line


def test_deeply_nested_sidecar_flag(make_ckpt, tmp_path):
    sidecar = tmp_path / "ids.json"
    sidecar.write_text(DEEP_JSON)
    res = run("metrics", make_ckpt("random"), "--sidecar", sidecar)
    assert "nested too deeply" in error_line(res, sidecar)


# --- a reader that stops early: the verdict keeps its code --------------------------


def _env() -> dict[str, str]:
    """This checkout first on the path; no GitHub Actions variables."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    for var in ("GITHUB_STEP_SUMMARY", "GITHUB_ACTIONS"):
        env.pop(var, None)
    return env


def _geodiag(args: list, stdout) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "geodiag.cli", *map(str, args)]
    return subprocess.run(cmd, stdout=stdout, stderr=subprocess.PIPE, text=True, env=_env())


def test_closed_stdout_keeps_the_gate_code(make_ckpt):
    """stdout's reader is gone before the first line (a deterministic EPIPE): the run
    still ends with its verdict's code, 0 pass or 1 fail, and says nothing on stderr."""
    for kind, code in (("random", 0), ("mean", 1)):
        ckpt = make_ckpt(kind)
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            res = _geodiag(["check", ckpt, ckpt, "--permutations", 10], stdout=write_end)
        finally:
            os.close(write_end)
        assert (kind, res.returncode) == (kind, code), res.stderr
        assert res.stderr == ""


def test_check_piped_to_head(make_ckpt):
    for kind, code in (("random", 0), ("mean", 1)):
        ckpt = make_ckpt(kind)
        cmd = [sys.executable, "-m", "geodiag.cli", "check", *[str(ckpt)] * 3]
        script = shlex.join([*cmd, "--permutations", "10"]) + " | head -1; exit ${PIPESTATUS[0]}"
        res = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=_env())
        assert (kind, res.returncode) == (kind, code), res.stderr
        assert len(res.stdout.splitlines()) == 1
        assert "Traceback" not in res.stderr and "Broken pipe" not in res.stderr


# --- a bug is not a failed gate ------------------------------------------------------


def _boom(*args, **kwargs):
    raise ValueError("boom\nsecond line")


def test_unexpected_error_exits_2_with_one_line(make_ckpt, monkeypatch):
    monkeypatch.setattr(geodiag.analysis.checkpoint, "measure_checkpoint", _boom)
    res = run("check", make_ckpt("random"), env={"GEODIAG_DEBUG": None})
    assert res.exit_code == 2, res.output
    assert res.stderr.strip().splitlines() == [
        "error: unexpected ValueError: boom (a bug in geodiag; rerun with GEODIAG_DEBUG=1 for "
        "the traceback)"
    ]


def test_unexpected_error_with_debug_shows_the_traceback(make_ckpt, monkeypatch):
    monkeypatch.setattr(geodiag.analysis.checkpoint, "measure_checkpoint", _boom)
    res = run("metrics", make_ckpt("random"), env={"GEODIAG_DEBUG": "1"})
    assert res.exit_code == 2
    assert "Traceback" in res.stderr and "_boom" in res.stderr
    assert res.stderr.strip().splitlines()[-1].startswith("error: unexpected ValueError: boom")


def test_main_maps_an_error_outside_the_commands_to_2(monkeypatch, capsys):
    def broken_app():
        raise RuntimeError("typer broke")

    monkeypatch.setattr(cli, "app", broken_app)
    monkeypatch.delenv("GEODIAG_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        cli.main()
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith("error: unexpected RuntimeError: typer broke")


# --- help keeps its brackets ----------------------------------------------------------


def test_help_keeps_bracketed_text():
    text = run("check", "--help", env={"COLUMNS": "200"}).stdout
    for literal in ("[off]", "[0.1]", "[0.9]", "[0.05]", "[tool.geodiag]"):
        assert literal in text, literal
    assert "--min-effective-rank-ratio" in text  # not cut to "--min-effective-rank-ra…"


@pytest.mark.parametrize("command", ["metrics", "check", "drift", "report", "export-projector"])
def test_every_help_is_plain_text(command):
    res = run(command, "--help", env={"COLUMNS": "200"})
    assert res.exit_code == 0
    assert "╭" not in res.stdout  # rich panels, whose markup eats "[...]"
    assert "[default: " in res.stdout
