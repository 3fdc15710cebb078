"""A config dataclass is the one source of its options: typer flags, bounds, TOML types."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from geodiag.errors import InputError, exits_on_bad_input
from geodiag.settings import (
    check_bounds,
    default_of,
    from_table,
    options_from,
    same_as,
    setting,
    spec_of,
    tagged,
)


@dataclass
class Toy:
    steps: int = setting(3, help="Steps.", ge=1)
    ratio: float = setting(0.5, help="A share.", ge=0, lt=1, tags=("pinned",))
    lr: float = setting(1e-3, help="Rate.", gt=0)
    cap: int = setting(5, help="At most.", le=10)
    out: Path | None = setting(None, help="Where.", flags=("-o", "--out"), tags=("pinned",))
    names: tuple[str, ...] = setting(
        (),
        help="Repeatable.",
        flags=("--name",),
        cli_type=list[str] | None,
        cli_default=None,
        parse=lambda v: tuple(v or ()),
    )
    hidden: int = 7  # not an option


def command(extra: int = 0, cfg: Toy = Toy(), last: bool = False) -> None:
    check_bounds(cfg)
    typer.echo(repr((extra, cfg, last)))


app = typer.Typer()
app.command("run")(exits_on_bad_input(options_from("cfg", Toy)(command)))
app.command("noop")(lambda: None)


def test_options_stand_in_place_of_the_config_and_build_it():
    res = CliRunner().invoke(app, ["run", "--steps", "5", "-o", "x", "--name", "a", "--name", "b"])
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() == repr((0, Toy(steps=5, out=Path("x"), names=("a", "b")), False))
    help_text = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200"}).stdout
    order = [help_text.index(f) for f in ("--extra", "--steps", "--ratio", "--name", "--last")]
    assert order == sorted(order) and "--hidden" not in help_text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--steps", "0"], "error: --steps: must be >= 1, got 0"),
        (["--ratio", "1"], "error: --ratio: must be in [0, 1), got 1.0"),
        (["--lr", "0"], "error: --lr: must be > 0, got 0.0"),
        (["--cap", "11"], "error: --cap: must be <= 10, got 11"),
    ],
)
def test_bounds_name_the_flag_and_exit_2(args, message):
    res = CliRunner().invoke(app, ["run", *args])
    assert res.exit_code == 2 and res.stderr.strip() == message


def test_toml_values_are_checked_against_the_type_hints():
    cfg = from_table(Toy, {"steps": 2, "out": "a/b", "names": ["x"], "ratio": 0}, "f.toml", "toy")
    assert cfg == Toy(steps=2, out=Path("a/b"), names=("x",), ratio=0.0)
    assert isinstance(cfg.ratio, float)
    for key, value, want in [("steps", 1.5, "int"), ("steps", True, "int"), ("out", 3, "path")]:
        with pytest.raises(InputError, match=rf"\[toy\] {key} must be (a )?{want}"):
            from_table(Toy, {key: value}, "f.toml", "toy")
    assert tagged(Toy, "pinned") == ("ratio", "out")


@dataclass
class Outer:
    title: str = setting("a", help="Title.")
    inner: Toy = setting(default_factory=Toy, nested=True)
    seed: int = setting(0, help="Seed.")


def test_a_nested_config_puts_its_options_in_its_place():
    outer = typer.Typer()

    @outer.command("run")
    @options_from("cfg", Outer)
    def run(cfg: Outer = Outer()) -> None:
        typer.echo(repr(cfg))

    outer.command("noop")(lambda: None)
    res = CliRunner().invoke(outer, ["run", "--steps", "4", "--seed", "2", "--title", "b"])
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() == repr(Outer(title="b", inner=Toy(steps=4), seed=2))
    help_text = CliRunner().invoke(outer, ["run", "--help"], env={"COLUMNS": "200"}).stdout
    order = [help_text.index(f) for f in ("--title", "--steps", "--cap", "--seed")]
    assert order == sorted(order)


@dataclass
class Again:
    steps: int = same_as(Toy, "steps")
    cap: int = same_as(Toy, "cap", help=None)  # the same setting, not on this command line
    shown: int = setting(4, help="Shown.", ge=1, le=9, show_bounds=True)


def test_default_of_and_same_as_read_the_one_field():
    assert default_of(Toy, "steps") == 3 and default_of(Toy, "names") == ()
    with pytest.raises(TypeError, match="no default"):

        @dataclass
        class NoDefault:
            x: int = setting(help="X.")

        default_of(NoDefault, "x")
    with pytest.raises(AttributeError, match="no field 'nope'"):
        default_of(Toy, "nope")
    assert Again() == Again(steps=3, cap=5)
    specs = {f.name: spec_of(f) for f in fields(Again)}
    assert specs["steps"] == spec_of(next(f for f in fields(Toy) if f.name == "steps"))
    assert specs["cap"].help is None and specs["cap"].le == 10
    with pytest.raises(InputError, match="--steps: must be >= 1"):
        check_bounds(Again(steps=0))


def test_show_bounds_lets_typer_check_and_show_them():
    again = typer.Typer()

    @again.command("run")
    @options_from("cfg", Again)
    def run(cfg: Again = Again()) -> None:
        typer.echo(repr(cfg))

    again.command("noop")(lambda: None)
    help_text = CliRunner().invoke(again, ["run", "--help"], env={"COLUMNS": "200"}).stdout
    assert "1<=x<=9" in help_text and "--cap" not in help_text
    res = CliRunner().invoke(again, ["run", "--shown", "10"])
    assert res.exit_code == 2 and "10 is not in the range 1<=x<=9" in res.output
    with pytest.raises(ValueError, match="ge / le"):
        setting(1, help="X.", gt=0, show_bounds=True)
