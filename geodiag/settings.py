"""Config dataclasses as the single source of their command-line options.

A field declared with :func:`setting` carries its help text, its flag names, its
bounds and its roles in the field's metadata. From that one declaration come:

- the typer options of a command (:func:`options_from`, a decorator that puts the
  options in place of one ``cfg``-like parameter and builds the dataclass);
- the checks of simple bounds, with the flag named in the message (:func:`check_bounds`);
- the conversion of a TOML table, from the type hints (:func:`from_table`);
- the lists of fields with a given role (:func:`tagged`), e.g. gti's "set by the
  experiment runner" or "may change when a run resumes";
- the defaults of other front doors (:func:`default_of`: an API keyword, a config of
  gti) and fields that stand for the same setting in another config (:func:`same_as`).

So adding a setting to a command is one field, and its default is written there only. Import-light: typer is imported
only when a command is built.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import MISSING, dataclass, field
from pathlib import Path
from typing import Annotated, Any

from geodiag.errors import InputError

KEY = "geodiag.settings"

# The groups of a command's options in --help, in the order it shows them
# (geodiag.command_line): a config class names its group with ``HELP_PANEL``, a field
# with ``setting(panel=...)``.
INPUTS = "Inputs"
REFERENCE = "Reference and usage"  # which untrained rows count: a before, what feeds them
THRESHOLDS = "Thresholds"
MEASURING = "Measuring"
OUTPUTS = "Outputs"
PANELS = (INPUTS, REFERENCE, THRESHOLDS, MEASURING, OUTPUTS)
UNSET: Any = type("Unset", (), {"__repr__": lambda self: "UNSET"})()
REQUIRED: Any = type("Required", (), {"__repr__": lambda self: "REQUIRED"})()  # cli_default


@dataclass(frozen=True)
class Spec:
    """What a field says about itself (``field.metadata[KEY]``)."""

    help: str | None  # None: not on the command line
    flags: tuple[str, ...] = ()  # default: --field-name
    cli_type: Any = None  # the type typer parses, when it differs from the field's
    parse: Callable[[Any], Any] | None = None  # command-line value -> field value
    cli_default: Any = UNSET  # the command line's default, when it differs from the field's
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    tags: frozenset[str] = frozenset()
    argument: bool = False  # a positional argument instead of an option
    nested: bool = False  # a dataclass whose options stand in this field's place
    show_bounds: bool = False  # typer checks the bounds too, and --help shows them
    panel: str | None = None  # its group in --help (default: its class's HELP_PANEL)
    typer_kwargs: tuple[tuple[str, Any], ...] = ()

    def flag(self, name: str) -> str:
        long = [f for f in self.flags if f.startswith("--")]
        return long[0] if long else "--" + name.replace("_", "-")


def setting(
    default: Any = MISSING,
    *,
    help: str | None = None,
    default_factory: Any = MISSING,
    flags: tuple[str, ...] = (),
    cli_type: Any = None,
    parse: Callable[[Any], Any] | None = None,
    cli_default: Any = UNSET,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    tags: Iterable[str] = (),
    argument: bool = False,
    nested: bool = False,
    show_bounds: bool = False,
    panel: str | None = None,
    **typer_kwargs: Any,
) -> Any:
    """A dataclass field that describes its command-line option (``help`` None: none).

    ``show_bounds``: typer checks the bounds as well (click's ``int range``, an exit-2
    usage error) and ``--help`` shows them (``x>=0``); :func:`check_bounds` checks them
    for every other way in (closed bounds only: typer has no open ones). ``panel``: the
    option's group in ``--help`` (geodiag.command_line.PANELS), when not its class's
    ``HELP_PANEL``."""
    if show_bounds and (gt is not None or lt is not None):
        raise ValueError("show_bounds takes ge / le: typer's ranges have no open bounds")
    spec = Spec(
        help=help,
        flags=tuple(flags),
        cli_type=cli_type,
        parse=parse,
        cli_default=cli_default,
        ge=ge,
        gt=gt,
        le=le,
        lt=lt,
        tags=frozenset(tags),
        argument=argument,
        nested=nested,
        show_bounds=show_bounds,
        panel=panel,
        typer_kwargs=tuple(sorted(typer_kwargs.items())),
    )
    return field(default=default, default_factory=default_factory, metadata={KEY: spec})


def _field(cls: type, name: str) -> dataclasses.Field:
    found = {f.name: f for f in dataclasses.fields(cls)}
    if name not in found:
        raise AttributeError(f"{cls.__name__} has no field {name!r}")
    return found[name]


def default_of(cls: type, name: str) -> Any:
    """The default of field ``name`` of ``cls``: for an API keyword or another config that
    takes the same setting, so that its default is written once, on the field."""
    value = _default(_field(cls, name))
    if value is inspect.Parameter.empty:
        raise TypeError(f"{cls.__name__}.{name} has no default")
    return value


def same_as(cls: type, name: str, **changes: Any) -> Any:
    """A field that is field ``name`` of ``cls`` again, in another config: the same
    default, help, flags and bounds; ``changes`` replace parts of its :class:`Spec`
    (``help=None``: not on this config's command line)."""
    f = _field(cls, name)
    spec = dataclasses.replace(spec_of(f), panel=panel_of(cls, f), **changes)
    return field(default=f.default, default_factory=f.default_factory, metadata={KEY: spec})


def spec_of(f: dataclasses.Field) -> Spec:
    return f.metadata.get(KEY) or Spec(help=None)


def panel_of(cls: type, f: dataclasses.Field) -> str | None:
    """The group of field ``f`` of ``cls`` in a command's ``--help``: its own, or the
    class attribute ``HELP_PANEL`` (one place for the options of a config)."""
    return spec_of(f).panel or getattr(cls, "HELP_PANEL", None)


def tagged(cls: type, tag: str) -> tuple[str, ...]:
    """Names of the fields of ``cls`` that carry ``tag``, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(cls) if tag in spec_of(f).tags)


def check_bounds(cfg: object) -> None:
    """Raise InputError naming the flag of the first field outside its declared bounds."""
    for f in dataclasses.fields(cfg):  # type: ignore[arg-type]
        s = spec_of(f)
        value = getattr(cfg, f.name)
        lower = (s.ge, ">=", "[") if s.ge is not None else (s.gt, ">", "(")
        upper = (s.le, "<=", "]") if s.le is not None else (s.lt, "<", ")")
        if value is None or (lower[0] is None and upper[0] is None):
            continue
        lo_ok = lower[0] is None or (value >= lower[0] if lower[1] == ">=" else value > lower[0])
        hi_ok = upper[0] is None or (value <= upper[0] if upper[1] == "<=" else value < upper[0])
        if lo_ok and hi_ok:
            continue
        if lower[0] is not None and upper[0] is not None:
            want = f"in {lower[2]}{_num(lower[0])}, {_num(upper[0])}{upper[2]}"
        else:
            bound = lower if lower[0] is not None else upper
            want = f"{bound[1]} {_num(bound[0])}"
        raise InputError(s.flag(f.name), f"must be {want}, got {value}")


def _num(x: float | None) -> str:
    return str(int(x)) if x is not None and float(x).is_integer() else str(x)


def _default(f: dataclasses.Field) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return inspect.Parameter.empty


def cli_parameters(cls: type, *, without: Iterable[str] = ()) -> list[inspect.Parameter]:
    """One keyword parameter per command-line field of ``cls``, annotated for typer."""
    import typer

    hints = typing.get_type_hints(cls)
    skip = set(without)
    params = []
    for f in dataclasses.fields(cls):
        s = spec_of(f)
        if s.nested and f.name not in skip:
            params += cli_parameters(hints[f.name])
            continue
        if s.help is None or f.name in skip:
            continue
        kind = s.cli_type if s.cli_type is not None else hints[f.name]
        make = typer.Argument if s.argument else typer.Option
        panel = {} if s.argument else {"rich_help_panel": panel_of(cls, f)}
        option = make(*s.flags, help=s.help, **panel, **_typer_bounds(s), **dict(s.typer_kwargs))
        default = s.cli_default if s.cli_default is not UNSET else _default(f)
        default = inspect.Parameter.empty if default is REQUIRED else default
        params.append(
            inspect.Parameter(
                f.name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=default,
                annotation=Annotated[kind, option],
            )
        )
    return params


def _typer_bounds(s: Spec) -> dict[str, Any]:
    if not s.show_bounds:
        return {}
    bounds = {"min": s.ge, "max": s.le}
    return {k: v for k, v in bounds.items() if v is not None}


def from_cli(cls: type, values: dict[str, Any], **fixed: Any) -> Any:
    """``cls`` from command-line values (parsed as the fields say) and fixed fields."""
    hints = typing.get_type_hints(cls)
    values = dict(values)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if spec_of(f).nested:
            inner = {p.name for p in cli_parameters(hints[f.name])}
            kwargs[f.name] = from_cli(
                hints[f.name], {k: values.pop(k) for k in inner & set(values)}
            )
    specs = {f.name: spec_of(f) for f in dataclasses.fields(cls)}
    kwargs |= {k: specs[k].parse(v) if specs[k].parse else v for k, v in values.items()}
    return cls(**kwargs, **fixed)


def options_from(
    param: str,
    cls: type,
    *,
    without: Iterable[str] = (),
    build: Callable[[dict[str, Any]], Any] | None = None,
) -> Callable:
    """Decorate a typer command: its parameter ``param`` (a ``cls``) becomes one option
    per command-line field of ``cls``, in its place; the command receives the built
    ``cls``, or ``build({field: command-line value})`` (e.g. ``dict``, for options whose
    unset default is not the field's). Fields in ``without`` are not options and keep
    their defaults."""

    def decorate(fn: Callable) -> Callable:
        hints = typing.get_type_hints(fn, include_extras=True)
        sig = inspect.signature(fn)
        generated = cli_parameters(cls, without=without)
        names = {p.name for p in generated}
        params: list[inspect.Parameter] = []
        for p in sig.parameters.values():
            if p.name == param:
                params += generated
            else:
                params.append(p.replace(annotation=hints.get(p.name, p.annotation)))

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            values = {k: kwargs.pop(k) for k in list(kwargs) if k in names}
            built = from_cli(cls, values) if build is None else build(values)
            return fn(*args, **kwargs, **{param: built})

        wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        return wrapper

    return decorate


def from_table(cls: type, table: dict[str, Any], where: str, section: str, **fixed: Any) -> Any:
    """``cls(**table)`` with every value checked against the field's type hint (lists
    become tuples, strings paths); ``where`` and ``section`` name the table in errors."""
    hints = typing.get_type_hints(cls)
    kwargs = {
        key: coerce(value, hints[key], where, f"[{section}] {key}") for key, value in table.items()
    }
    return cls(**kwargs, **fixed)


def coerce(value: Any, hint: Any, where: str, what: str) -> Any:
    """``value`` read from TOML as the type ``hint`` wants it, or InputError."""
    options = typing.get_args(hint) if _is_union(hint) else (hint,)
    if value is None and type(None) in options:
        return None
    kinds = [o for o in options if o is not type(None)]
    kind = kinds[0] if len(kinds) == 1 else hint
    origin = typing.get_origin(kind)
    if origin is tuple:
        if not isinstance(value, list):
            raise InputError(where, f"{what} must be a list, got {value!r}")
        args = typing.get_args(kind)
        item = args[0] if len(args) == 2 and args[1] is Ellipsis else None
        return tuple(coerce(v, item, where, what) if item else v for v in value)
    if kind is Path:
        if not isinstance(value, str):
            raise InputError(where, f"{what} must be a path string, got {value!r}")
        return Path(value)
    if kind in (bool, int, float, str):
        allowed = (int, float) if kind is float else kind
        if not isinstance(value, allowed) or (isinstance(value, bool) and kind is not bool):
            raise InputError(where, f"{what} must be {kind.__name__}, got {value!r}")
        return float(value) if kind is float else value
    return value


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)
