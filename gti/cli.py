"""``gti`` command line: thin wrappers that build a config and call one library function.

Commands follow the data flow: ``data``, ``sids``, ``init``, ``sft``, ``evaluate``,
and ``experiment``, which chains them. Bad input exits with code 2 and a one-line message,
and so does any command in an install without torch and transformers (the gate's install).
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from geodiag.command_line import App
from geodiag.errors import InputError, MissingExtra, require_extra
from geodiag.settings import options_from
from gti.data.movielens import NAME as MOVIELENS
from gti.errors import exits_on_bad_input
from gti.options import CACHE_HELP
from gti.presets.cli import presets_app
from gti.semantic_ids.config import SidsConfig

# Every gti command trains or encodes with these; geodiag's light install has neither. torch
# comes first and pinned, as the Makefile installs it: a bare `torch` resolves to a CUDA build.
GTI_MODULES = ("torch", "transformers")
GTI_INSTALL = "pip install torch==2.13.0 'geodiag[gti]'"

# The help style of geodiag's (geodiag.command_line): panels, one example per command.
app = App(
    help="gti: semantic IDs, new-token initialization and training. The commands need "
    f"torch and transformers: {GTI_INSTALL}",
    short_help="Semantic IDs, new-token initialization and training.",
    example="gti experiment configs/tiny.toml",
)
FETCHABLE = (MOVIELENS,)  # what `gti data fetch` downloads
data_app = App(help=f"Datasets: download one into the cache ({', '.join(FETCHABLE)}).")
sids_app = App(help="Semantic IDs from item text (RQ-VAE).")
app.add_typer(data_app, name="data")
app.add_typer(sids_app, name="sids")
app.add_typer(presets_app, name="presets")

CacheDir = Annotated[
    Path | None,
    typer.Option("--cache-dir", help=CACHE_HELP),
]


@data_app.command("fetch", example=f"gti data fetch {MOVIELENS}")
@exits_on_bad_input
def data_fetch(
    name: Annotated[
        str,
        typer.Argument(help=f"Dataset to download: {', '.join(FETCHABLE)}.", metavar="NAME"),
    ],
    cache_dir: CacheDir = None,
) -> None:
    """Download a dataset into the cache once (a second call does nothing)."""
    from gti.data import movielens

    if name not in FETCHABLE:
        raise InputError("NAME", f"unknown dataset {name!r}; fetchable: {', '.join(FETCHABLE)}")
    typer.echo(str(movielens.fetch(cache_dir)))


@sids_app.command(
    "build",
    example="gti sids build --data movielens-100k --model smollm2-135m -o runs/ml100k/sids/",
)
@exits_on_bad_input
@options_from("cfg", SidsConfig)
def sids_build(cfg: SidsConfig = SidsConfig()) -> None:
    """Build collision-free semantic IDs from item text.

    Writes exactly semantic_ids.json (geodiag sidecar, token_ids empty),
    codebooks.safetensors (one [codes, dim] tensor per learned level; the
    dedup level has none) and stats.json. Embeddings and the RQ-VAE fit are
    cached, so a re-run with the same inputs takes seconds.
    """
    from gti.semantic_ids.build import build_sids

    result = build_sids(cfg)
    summary = {
        "out": str(result.out),
        "n_items": result.stats["n_items"],
        "levels": [
            (lv["name"], lv["size"], round(lv["utilization"], 3)) for lv in result.stats["levels"]
        ],
        "collision_rate_before": result.stats["collisions_before"]["collision_rate"],
        "collision_rate_after": result.stats["collisions_after"]["collision_rate"],
        "total_s": round(result.stats["timings"]["total_s"], 1),
    }
    typer.echo(json.dumps(summary))


def _register_pipeline_commands() -> None:
    """init -> (probe) -> sft -> evaluate, and the runner that chains them (DESIGN.md data flow)."""
    from gti.evaluate.cli import evaluate
    from gti.experiment.cli import experiment
    from gti.init.cli import init
    from gti.probe.cli import probe
    from gti.sft.cli import sft
    from gti.study.cli import baselines, study_app

    app.command(
        "init", example="gti init --sids runs/ml100k/sids --strategy gti -o runs/ml100k/gti/init"
    )(init)
    app.command("probe", example="gti probe runs/ml100k/gti/init --write")(probe)
    app.command("sft", example="gti sft --init runs/ml100k/gti/init -o runs/ml100k/gti/sft")(sft)
    app.command("evaluate", example="gti evaluate runs/ml100k/gti/sft")(evaluate)
    app.command("experiment", example="gti experiment configs/cpu.toml")(experiment)
    app.command("baselines", example="gti baselines -o runs/ml100k/baselines")(baselines)
    app.add_typer(study_app, name="study")


_register_pipeline_commands()


def asks_for_help(args: list[str]) -> bool:
    """Whether the command line only asks for help (or for shell completion), which an
    install without torch can answer: ``gti``, ``gti --help``, ``gti init --help``, ``gti
    data``."""
    import os

    if "--help" in args or "_GTI_COMPLETE" in os.environ:  # typer's completion variable
        return True
    group = typer.main.get_command(app)
    for word in args:  # a group named without a command shows its help
        group = getattr(group, "commands", {}).get(word)
        if group is None:
            return False
    return hasattr(group, "commands")


def main() -> None:
    try:
        require_extra("gti", "torch and transformers", GTI_MODULES, GTI_INSTALL)
    except MissingExtra as e:
        if not asks_for_help(sys.argv[1:]):
            print(f"error: {e}", file=sys.stderr)
            raise SystemExit(2) from None
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    quiet_deepspeed_on_cpu()
    app()


def quiet_deepspeed_on_cpu() -> None:
    """No GPU: tell DeepSpeed (which transformers imports when it is installed, as the test
    install has it) that the accelerator is the CPU, so it does not open every gti command
    with "WARNING ... unable to detect" a GPU. A value the user set is kept."""
    import os

    try:
        import torch
    except ImportError:  # the gate's install: the command says what to install
        return
    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")


if __name__ == "__main__":
    main()
