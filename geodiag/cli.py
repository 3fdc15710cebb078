"""``geodiag`` command line: thin wrappers that build options and call one library function.

Exit codes: 0 ok, 1 a gate check failed, 2 bad input or usage, or anything else that
stops a run (an unwritable output, a bug: see ``geodiag.errors.exits_2_on_any_error``).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from geodiag.analysis.options import AnalyzeOptions
from geodiag.errors import exits_2_on_any_error, print_unexpected
from geodiag.escape import terminal
from geodiag.gate.checks import GateConfig
from geodiag.io.options import ReadOptions
from geodiag.report.options import DEFAULT_OUTPUT, ReportOptions
from geodiag.settings import from_cli, options_from
from geodiag.version import __version__

app = typer.Typer(
    help="Geometry diagnostics for new-token embeddings (Semantic IDs and other added vocabulary).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help: rich markup would eat the bracketed defaults ("[0.1]", "[off]") and
    # "[tool.geodiag]" in the option texts.
    rich_markup_mode=None,
)

# The options that say how to read a checkpoint are the fields of ReadOptions: a
# command takes ``read: ReadOptions = READ`` under ``@reads_checkpoints(...)``, which
# puts one option per field in its place (geodiag.settings).
READ = ReadOptions()


# The thresholds are the fields of GateConfig (the gate's table of checks): one option each,
# None when not given, so that a config file's value stands (geodiag.gate.checks.resolve_config).
NOT_GIVEN: dict = {}


# The reading options that count what feeds the new tokens (geodiag.io.usage): only the
# commands that judge untrained tokens take them.
USAGE = ("data", "chat_template")


def reads_checkpoints(*, without: tuple[str, ...] = ()):
    """Decorate a command: its ``read`` parameter becomes the reading options."""
    return options_from("read", ReadOptions, without=without)


# The measuring options (--permutations, --seed, --neighbors) are the fields of
# AnalyzeOptions: a command takes ``analysis: AnalyzeOptions = ANALYZE`` under
# ``@measures(...)``; ``fixed`` are the fields a command sets itself, whatever the default.
ANALYZE = AnalyzeOptions()


def measures(*, without: tuple[str, ...] = (), **fixed):
    """Decorate a command: its ``analysis`` parameter becomes the measuring options."""
    build = functools.partial(from_cli, AnalyzeOptions, **fixed)
    return options_from("analysis", AnalyzeOptions, without=without, build=build)


CHECKPOINT_HELP = (
    "Checkpoint folder or weights file, or a folder's URL: https://HOST/PATH, "
    "hf://ORG/NAME[@REVISION][/SUBFOLDER], s3://BUCKET/PREFIX or gs://BUCKET/PREFIX (read by "
    "byte ranges)."
)
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON only (strict: no NaN/Infinity).")]


def _say(text: str) -> None:
    """Print to stdout, where a reader that stops early (``geodiag check ... | head -1``)
    is not an error: the rest goes to /dev/null, as the Python docs recommend for
    SIGPIPE, and the command runs on to its own exit code (0 pass, 1 a check failed),
    since the verdict does not depend on who read the report. Files it writes after
    printing (none today) and GitHub annotations on stderr still happen."""
    try:
        typer.echo(text)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _version(value: bool) -> None:
    if value:
        _say(f"geodiag {__version__}")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True)] = False,
) -> None:
    pass


@app.command()
@exits_2_on_any_error
@reads_checkpoints()
@measures()
def metrics(
    ckpt: Annotated[str, typer.Argument(help=CHECKPOINT_HELP)],
    json_out: JsonOpt = False,
    read: ReadOptions = READ,
    analysis: AnalyzeOptions = ANALYZE,
) -> None:
    """Measure the geometry of the new tokens: a table, or JSON with --json."""
    from geodiag.analysis.checkpoint import analyze
    from geodiag.gate.text import metrics_table
    from geodiag.jsonio import dumps

    report = analyze(ckpt, read, analysis)
    # Compact JSON: the C encoder; indenting goes through json's pure-Python one, which took
    # a tenth of the run on SmolLM2 (pipe through `jq` to read it).
    _say(dumps(report, indent=None) if json_out else metrics_table(report))


@app.command()
@exits_2_on_any_error
@reads_checkpoints()
@options_from("thresholds", GateConfig, build=dict)
@measures(without=("neighbors_k",), neighbors_max=0)  # the gate needs no neighbours
def check(
    ckpt: Annotated[
        list[str], typer.Argument(help="One or more checkpoints to gate (folders, files or URLs).")
    ],
    thresholds: dict = NOT_GIVEN,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="TOML with thresholds ([tool.geodiag] or top level)."),
    ] = None,
    junit: Annotated[
        Path | None, typer.Option("--junit", help="Write JUnit XML, one testcase per check.")
    ] = None,
    sarif: Annotated[
        Path | None,
        typer.Option(
            "--sarif",
            help="Write a SARIF 2.1.0 log (GitHub code scanning), one result per failing or "
            "warning check.",
        ),
    ] = None,
    json_out: JsonOpt = False,
    read: ReadOptions = READ,
    analysis: AnalyzeOptions = ANALYZE,
) -> None:
    """Gate CI on the geometry: exit 0 pass, 1 a check failed, 2 bad input."""
    from geodiag.analysis.checkpoint import analyze
    from geodiag.gate.checks import resolve_config, run_gate
    from geodiag.gate.outputs import print_annotations, text_summary, write_ci_pages
    from geodiag.jsonio import dumps

    cfg = resolve_config(config, thresholds)
    reports = [analyze(p, read, analysis) for p in ckpt]
    results = [run_gate(rep, cfg) for rep in reports]
    write_ci_pages(reports, results, cfg, junit=junit, sarif=sarif)
    if json_out:
        _say(dumps({"config": cfg, "results": results, "passed": all(r.passed for r in results)}))
    else:
        from geodiag.gate.text import dropped_lines, integrity_lines, sample_lines
        from geodiag.gate.verdict import verdict

        for rep, res in zip(reports, results, strict=True):
            _say(text_summary(res))
            for m in rep.matrices:
                for line in dropped_lines(m, indent="  ") + sample_lines(m, indent="  "):
                    _say(terminal(f"{line} [{m.tensor}]"))
            for line in integrity_lines(rep):  # the vocabulary audit's findings among them
                _say(terminal(f"  {line}"))
            for note in rep.usage_notes:  # a source of usage that could not be counted
                _say(terminal(f"  note: {note}"))
            _say(terminal(f"  verdict: {verdict(rep, res).sentence}"))
    print_annotations(results)
    raise typer.Exit(0 if all(r.passed for r in results) else 1)


@app.command()
@exits_2_on_any_error
# What feeds the new tokens (--data, --chat-template) says nothing of how far they moved.
@reads_checkpoints(
    without=("sidecar", "codebooks", "allow_nonfinite", "reference", "auto_reference", *USAGE)
)
@measures(without=("neighbors_k",))
def drift(
    before: Annotated[str, typer.Argument(help="Earlier checkpoint (e.g. after init); a URL too.")],
    after: Annotated[
        str,
        typer.Argument(
            help="Later checkpoint with the same new tokens (e.g. after SFT); a URL too."
        ),
    ],
    json_out: JsonOpt = False,
    read: ReadOptions = READ,
    analysis: AnalyzeOptions = ANALYZE,
) -> None:
    """How far each new token moved, and whether the init's structure survived."""
    from geodiag.analysis.drift import analyze_drift
    from geodiag.gate.text import drift_table
    from geodiag.jsonio import dumps

    reports = analyze_drift(before, after, read, analysis)
    _say(dumps(reports) if json_out else drift_table(reports))


def report_options(param: str, *names: str):
    """Decorate ``report``: its ``param`` becomes the flags of these ReportOptions fields,
    handed over as a dict (the others are set by the command, or in another place of
    its --help)."""
    others = tuple(f.name for f in dataclasses.fields(ReportOptions) if f.name not in names)
    return options_from(param, ReportOptions, without=others, build=dict)


@app.command()
@exits_2_on_any_error
@reads_checkpoints(without=("reference",))  # each checkpoint's reference: its init (drift pair)
@report_options("page", "title", "heatmap_max_tokens")
@report_options("measuring", "n_permutations", "seed")  # last, as in the other commands
def report(
    ckpt: Annotated[
        list[str],
        typer.Argument(
            help="Checkpoints, compared side by side (e.g. init, then SFT; folders, files or "
            "URLs); the checkpoint-N folders of a run, and trajectory .jsonl files, add "
            "metric-vs-step plots."
        ),
    ],
    output: Annotated[
        Path,
        typer.Option(
            "-o",
            "--output",
            help="NAME.html to write; NAME.json (every number shown) goes beside it.",
        ),
    ] = DEFAULT_OUTPUT,
    page: dict = NOT_GIVEN,
    config: Annotated[
        Path | None, typer.Option("--config", help="TOML with gate thresholds, as for check.")
    ] = None,
    read: ReadOptions = READ,
    measuring: dict = NOT_GIVEN,
) -> None:
    """Write one self-contained HTML report (and its JSON) comparing the checkpoints."""
    import shlex

    from geodiag.gate.checks import resolve_config
    from geodiag.report import write_report

    opts = ReportOptions(
        **page,
        **measuring,
        gate=resolve_config(config, {}),
        command_line=shlex.join(["geodiag", *sys.argv[1:]]),
    )
    files = write_report(
        ckpt, output, read, opts, progress=lambda msg: typer.echo(terminal(msg), err=True)
    )
    _say(terminal(f"wrote {files.html} ({files.html_bytes / 1e6:.2f} MB) and {files.json}"))


# What `scan` reads: which matrix and whether non-finite rows are bad input; every row is
# scored, so no option says which rows are new.
SCAN_READ = ("tensor", "allow_nonfinite")


@app.command()
@exits_2_on_any_error
@reads_checkpoints(
    without=tuple(f.name for f in dataclasses.fields(ReadOptions) if f.name not in SCAN_READ)
)
def scan(
    ckpt: Annotated[str, typer.Argument(help=CHECKPOINT_HELP)],
    top: Annotated[int, typer.Option("--top", min=0, help="Tokens listed per matrix.")] = 30,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the rows sampled.")] = 0,
    json_out: JsonOpt = False,
    read: ReadOptions = READ,
) -> None:
    """Scan the whole vocabulary for under-trained tokens (Land & Bartolo 2024's
    indicators against the rows the files mark unused), every token, new or not."""
    from geodiag.analysis.scan import scan_lines, scan_vocabulary
    from geodiag.io.checkpoint import open_checkpoint
    from geodiag.jsonio import dumps

    ck = open_checkpoint(ckpt, dataclasses.replace(read, all_rows_new=True))
    result = scan_vocabulary(ck, seed)
    if json_out:
        _say(dumps(result, indent=None))
        return
    for line in scan_lines(result, top):
        _say(terminal(line))


@app.command("export-projector")
@exits_2_on_any_error
@reads_checkpoints(without=("codebooks", "reference", "auto_reference", *USAGE))
def export_projector(
    ckpt: Annotated[Path, typer.Argument(help="Checkpoint folder or weights file.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Folder for the projector files.")],
    read: ReadOptions = READ,
) -> None:
    """TensorBoard Embedding Projector files of the new tokens (vectors, metadata, config)."""
    from geodiag.report.projector import export_projector as export

    files = export(ckpt, output, read)
    _say(terminal("wrote " + ", ".join(str(f) for f in files)))
    _say(terminal(f"view: tensorboard --logdir {output}  (Projector tab)"))


def main() -> None:
    # click reports usage errors with exit 2 already; each command's errors are mapped by
    # exits_2_on_any_error. What escapes both (an error in typer's own machinery or an
    # option callback) is still a stopped run, never a failed gate: exit 2, one line.
    try:
        app()
    except Exception as e:
        print_unexpected(e)
        sys.exit(2)


if __name__ == "__main__":
    main()
