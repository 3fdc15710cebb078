"""``geodiag`` command line: thin wrappers that build options and call one library function.

Exit codes: 0 ok, 1 a gate check failed, 2 bad input or usage, or anything else that
stops a run (an unwritable output, a bug: see ``geodiag.errors.exits_2_on_any_error``).
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from geodiag.analysis.options import GATE_MEASURE, AnalyzeOptions
from geodiag.command_line import App
from geodiag.errors import exits_2_on_any_error, print_unexpected
from geodiag.escape import terminal
from geodiag.gate.checks import GateConfig
from geodiag.io.sources.options import ReadOptions
from geodiag.outputs.report.options import DEFAULT_OUTPUT, ReportOptions
from geodiag.settings import MEASURING, OUTPUTS, THRESHOLDS, from_cli, options_from
from geodiag.version import __version__

# The help style (plain text, options in panels, one example per command, completion) is
# gti's too: geodiag.command_line.
app = App(
    help="Geometry diagnostics for new-token embeddings (Semantic IDs and other added vocabulary).",
    example="geodiag check runs/ml100k/sft/",
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
JsonOpt = Annotated[
    bool,
    typer.Option(
        "--json", help="Print JSON only (strict: no NaN/Infinity).", rich_help_panel=OUTPUTS
    ),
]


def _say(text: str, console=None) -> None:
    """Print to stdout, where a reader that stops early (``geodiag check ... | head -1``)
    is not an error: the rest goes to /dev/null, as the Python docs recommend for
    SIGPIPE, and the command runs on to its own exit code (0 pass, 1 a check failed),
    since the verdict does not depend on who read the report. Files it writes after
    printing (none today) and GitHub annotations on stderr still happen.

    On a terminal the lines are wrapped to its width (``console``: a
    :class:`geodiag.outputs.console.Console`; default: wrapped, no colour); piped, whole."""
    from geodiag.outputs.console import Console

    console = console or Console.of(sys.stdout, no_color=True)
    try:
        typer.echo(console.show(text))
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
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    pass


@app.command(example="geodiag metrics runs/ml100k/sft/ --json")
@exits_2_on_any_error
@reads_checkpoints()
@measures()
def metrics(
    ckpt: Annotated[str, typer.Argument(help=CHECKPOINT_HELP, metavar="CKPT")],
    json_out: JsonOpt = False,
    read: ReadOptions = READ,
    analysis: AnalyzeOptions = ANALYZE,
) -> None:
    """Measure the geometry of the new tokens: a table, or JSON with --json."""
    from geodiag.analysis.checkpoint import measure_checkpoint
    from geodiag.jsonio import dumps
    from geodiag.outputs.text import metrics_table

    report = measure_checkpoint(ckpt, analysis, read=read)
    if not json_out:
        _say(metrics_table(report))
        return
    from geodiag.gate.checks import resolve_config
    from geodiag.gate.verdict import judge
    from geodiag.jsonio import to_jsonable

    # The gate's diagnosis under its defaults (and ./pyproject.toml's [tool.geodiag]), as
    # `geodiag check` words it: the sentence, its cause and its remedy.
    res = judge(report, resolve_config(None, {}))
    diagnosis = {"passed": res.passed, "verdict": res.verdict, "cause": res.cause}
    # Compact JSON: the C encoder; indenting goes through json's pure-Python one, which took
    # a tenth of the run on SmolLM2 (pipe through `jq` to read it).
    _say(dumps({**to_jsonable(report), **diagnosis, "remedy": res.remedy}, indent=None))


@app.command(example="geodiag check runs/ml100k/sft/ --data train.jsonl --junit gate.xml")
@exits_2_on_any_error
@reads_checkpoints()
@options_from("thresholds", GateConfig, build=dict)
@measures(without=("neighbors_k",), **GATE_MEASURE)
def check(
    ckpt: Annotated[
        list[str],
        typer.Argument(
            help="One or more checkpoints to gate (folders, files or URLs).", metavar="CKPT..."
        ),
    ],
    thresholds: dict = NOT_GIVEN,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            metavar="FILE",
            help="TOML with thresholds ([tool.geodiag] or top level).",
            rich_help_panel=THRESHOLDS,
        ),
    ] = None,
    junit: Annotated[
        Path | None,
        typer.Option(
            "--junit",
            metavar="FILE",
            help="Write JUnit XML, one testcase per check.",
            rich_help_panel=OUTPUTS,
        ),
    ] = None,
    sarif: Annotated[
        Path | None,
        typer.Option(
            "--sarif",
            metavar="FILE",
            help="Write a SARIF 2.1.0 log (GitHub code scanning), one result per failing or "
            "warning check.",
            rich_help_panel=OUTPUTS,
        ),
    ] = None,
    json_out: JsonOpt = False,
    quiet: Annotated[
        bool,
        typer.Option(
            "-q",
            "--quiet",
            help="Print the failed checkpoints' failures and verdicts, and a summary.",
            rich_help_panel=OUTPUTS,
        ),
    ] = False,
    no_color: Annotated[
        bool,
        typer.Option(
            "--no-color",
            help="No colour on a terminal (as NO_COLOR does); piped output has none.",
            rich_help_panel=OUTPUTS,
        ),
    ] = False,
    read: ReadOptions = READ,
    analysis: AnalyzeOptions = ANALYZE,
) -> None:
    """Gate CI on the geometry: exit 0 pass, 1 a check failed, 2 bad input."""
    from geodiag.analysis.checkpoint import measure_checkpoint
    from geodiag.gate.checks import resolve_config
    from geodiag.gate.verdict import judge
    from geodiag.jsonio import dumps
    from geodiag.outputs.ci import print_annotations, write_ci_pages

    cfg = resolve_config(config, thresholds)
    reports = [measure_checkpoint(p, analysis, read=read) for p in ckpt]
    results = [judge(rep, cfg) for rep in reports]
    write_ci_pages(reports, results, cfg, junit=junit, sarif=sarif)
    if json_out:
        _say(dumps({"config": cfg, "results": results, "passed": all(r.passed for r in results)}))
    else:
        from geodiag.outputs.ci import check_text, summary_line
        from geodiag.outputs.console import Console

        console = Console.of(sys.stdout, no_color=no_color)
        for rep, res in zip(reports, results, strict=True):
            if not (quiet and res.passed):
                _say(check_text(rep, res, quiet=quiet), console)
        if len(results) > 1 or quiet:
            _say(summary_line(results), console)
    print_annotations(results)
    raise typer.Exit(0 if all(r.passed for r in results) else 1)


@app.command(example="geodiag drift runs/ml100k/init/ runs/ml100k/sft/")
@exits_2_on_any_error
# What feeds the new tokens (--data, --chat-template) says nothing of how far they moved.
@reads_checkpoints(
    without=("sidecar", "codebooks", "allow_nonfinite", "reference", "auto_reference", *USAGE)
)
@measures(without=("neighbors_k",))
def drift(
    before: Annotated[
        str,
        typer.Argument(help="Earlier checkpoint (e.g. after init); a URL too.", metavar="BEFORE"),
    ],
    after: Annotated[
        str,
        typer.Argument(
            help="Later checkpoint with the same new tokens (e.g. after SFT); a URL too.",
            metavar="AFTER",
        ),
    ],
    json_out: JsonOpt = False,
    read: ReadOptions = READ,
    analysis: AnalyzeOptions = ANALYZE,
) -> None:
    """How far each new token moved, and whether the init's structure survived."""
    from geodiag.analysis.drift import measure_drift
    from geodiag.jsonio import dumps
    from geodiag.outputs.text import drift_table

    reports = measure_drift(before, after, read, analysis)
    _say(dumps(reports) if json_out else drift_table(reports))


def report_options(param: str, *names: str):
    """Decorate ``report``: its ``param`` becomes the flags of these ReportOptions fields,
    handed over as a dict (the others are set by the command, or in another place of
    its --help)."""
    others = tuple(f.name for f in dataclasses.fields(ReportOptions) if f.name not in names)
    return options_from(param, ReportOptions, without=others, build=dict)


@app.command(example="geodiag report runs/ml100k/init/ runs/ml100k/sft/ -o reports/ml100k.html")
@exits_2_on_any_error
@reads_checkpoints(without=("reference",))  # each checkpoint's reference: its init (drift pair)
@report_options("page", "title", "heatmap_max_tokens", "pairs")
@report_options("measuring", "n_permutations", "seed")  # last, as in the other commands
def report(
    ckpt: Annotated[
        list[str],
        typer.Argument(
            help="Checkpoints, compared side by side (folders, files or URLs; the order pairs "
            "nothing: see --pair); the checkpoint-N folders of a run, and trajectory .jsonl "
            "files, add metric-vs-step plots.",
            metavar="CKPT...",
        ),
    ],
    output: Annotated[
        Path,
        typer.Option(
            "-o",
            "--output",
            metavar="FILE",
            help="NAME.html to write; NAME.json (every number shown) goes beside it.",
            rich_help_panel=OUTPUTS,
        ),
    ] = DEFAULT_OUTPUT,
    page: dict = NOT_GIVEN,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            metavar="FILE",
            help="TOML with gate thresholds, as for check.",
            rich_help_panel=THRESHOLDS,
        ),
    ] = None,
    read: ReadOptions = READ,
    measuring: dict = NOT_GIVEN,
) -> None:
    """Write one self-contained HTML report (and its JSON) comparing the checkpoints."""
    import shlex

    from geodiag.gate.checks import resolve_config
    from geodiag.outputs.report import write_report

    opts = ReportOptions(
        **{**page, "pairs": tuple(page.get("pairs") or ())},
        **measuring,
        gate=resolve_config(config, {}),
        command_line=shlex.join(["geodiag", *sys.argv[1:]]),
    )
    files = write_report(
        ckpt, output, read, opts, progress=lambda msg: typer.echo(terminal(msg), err=True)
    )
    _say(terminal(f"wrote {files.html} ({files.html_bytes / 1e6:.2f} MB) and {files.json}"))
    if files.replaced:  # the default output is the same file every run: say what it replaced
        keep = " (give -o NAME.html to keep them)" if output == DEFAULT_OUTPUT else ""
        names = " and ".join(str(p) for p in files.replaced)
        _say(terminal(f"replaced {names}, written by an earlier run{keep}"))


# What `scan` reads: which matrix and whether non-finite rows are bad input; every row is
# scored, so no option says which rows are new.
SCAN_READ = ("tensor", "allow_nonfinite")


@app.command(example="geodiag scan gemma-3-270m-q4_k_m.gguf --top 20")
@exits_2_on_any_error
@reads_checkpoints(
    without=tuple(f.name for f in dataclasses.fields(ReadOptions) if f.name not in SCAN_READ)
)
def scan(
    ckpt: Annotated[str, typer.Argument(help=CHECKPOINT_HELP, metavar="CKPT")],
    top: Annotated[
        int,
        typer.Option(
            "--top", min=0, metavar="N", help="Tokens listed per matrix.", rich_help_panel=OUTPUTS
        ),
    ] = 30,
    seed: Annotated[
        int,
        typer.Option(
            "--seed", metavar="N", help="Seed of the rows sampled.", rich_help_panel=MEASURING
        ),
    ] = 0,
    unused: Annotated[
        str | None,
        typer.Option(
            "--unused",
            metavar="IDS",
            help="Rows to measure against instead of those the files mark unused "
            "(ID,START:END,...; END exclusive). Without it, and with fewer marked, the scan "
            "falls back to the special tokens, then the rows of least norm, and says so.",
            rich_help_panel=MEASURING,
        ),
    ] = None,
    json_out: JsonOpt = False,
    read: ReadOptions = READ,
) -> None:
    """Scan the whole vocabulary for under-trained tokens (Land & Bartolo 2024's
    indicators against the rows the files mark unused), every token, new or not."""
    from geodiag.analysis.scan import UNUSED_FLAG, scan_lines, scan_vocabulary
    from geodiag.io.checkpoint import open_checkpoint
    from geodiag.io.sources.options import parse_ids
    from geodiag.jsonio import dumps

    ids = parse_ids(unused, UNUSED_FLAG)
    ck = open_checkpoint(ckpt, dataclasses.replace(read, all_rows_new=True))
    result = scan_vocabulary(ck, seed, ids)
    if json_out:
        _say(dumps(result, indent=None))
        return
    for line in scan_lines(result, top):
        _say(terminal(line))


@app.command("export-projector", example="geodiag export-projector runs/ml100k/sft/ -o projector/")
@exits_2_on_any_error
@reads_checkpoints(without=("codebooks", "reference", "auto_reference", *USAGE))
def export_projector(
    ckpt: Annotated[
        Path, typer.Argument(help="Checkpoint folder or weights file.", metavar="CKPT")
    ],
    output: Annotated[
        Path,
        typer.Option(
            "-o",
            "--output",
            metavar="DIR",
            help="Folder for the projector files.",
            rich_help_panel=OUTPUTS,
        ),
    ],
    read: ReadOptions = READ,
) -> None:
    """TensorBoard Embedding Projector files of the new tokens (vectors, metadata, config)."""
    from geodiag.outputs.report.projector import export_projector as export

    files = export(ckpt, output, read)
    _say(terminal("wrote " + ", ".join(str(f) for f in files)))
    _say(terminal(f"view: tensorboard --logdir {output}  (Projector tab)"))


def main() -> None:
    # One command, then exit: what is loaded by now (modules, typer's app) lives to the end.
    # Frozen, the cyclic collector never walks it again, neither during the run nor at
    # exit, where its collections took ~50 ms of a 0.8 s `geodiag check` (bench/check_speed.py).
    gc.freeze()
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
