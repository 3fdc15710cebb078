"""The one error type a user can cause: bad input, and the one place a command turns it
into exit code 2 (``exits_on_bad_input``). A missing optional dependency group is one
kind of it (``require_extra``): the command names what to install, no traceback."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable
from functools import wraps
from os import PathLike
from typing import TypeVar

from geodiag.escape import terminal

F = TypeVar("F", bound=Callable[..., object])


class InputError(Exception):
    """Bad input: names the file (or flag) at fault and what is wrong with it.

    ``str(err)`` is ``"<where>: <problem>"``, fit to print through
    :func:`geodiag.escape.terminal` (either may quote a file: a name with a newline).
    """

    def __init__(self, where: str | PathLike[str], problem: str) -> None:
        self.where = str(where)
        self.problem = problem
        super().__init__(f"{self.where}: {problem}")


class MissingExtra(InputError):
    """A command needs modules of an optional dependency group that is not installed."""

    def __init__(self, command: str, needs: str, missing: list[str], install: str) -> None:
        self.missing = missing
        self.install = install
        no_module = ", ".join(missing)
        super().__init__(command, f"needs {needs} (no module {no_module}): {install}")


def require_extra(command: str, needs: str, modules: Iterable[str], install: str) -> None:
    """Raise :class:`MissingExtra` unless every module can be imported. Looks the modules
    up without importing them, so a present torch costs nothing here."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingExtra(command, needs, missing, install)


def exits_on_bad_input(fn: F) -> F:
    """Wrap a typer command: InputError -> one ``error: <where>: <problem>`` line on
    stderr and exit code 2. typer is imported when the command runs, not before."""

    @wraps(fn)
    def wrapper(*args: object, **kwargs: object) -> object:
        import typer

        try:
            return fn(*args, **kwargs)
        except InputError as e:
            # where and problem may quote a file (a level name, a token): shown, not obeyed.
            typer.echo(terminal(f"error: {e}"), err=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def exits_2_on_any_error(fn: F) -> F:
    """:func:`exits_on_bad_input`, for geodiag's commands, whose exit 1 means "the gate
    failed" and nothing else: an OSError left unconverted by the code that opened the
    file (it names the file) exits 2 with one line too, and so does any other exception,
    as a bug, with a hint to rerun with ``GEODIAG_DEBUG=1`` for its traceback. typer's
    and click's own exceptions (an exit code, a usage error) pass through. (gti's
    commands keep Python's traceback and exit 1 for a crash: gti has no gate whose code
    a crash could pass for.)"""
    inner = exits_on_bad_input(fn)

    @wraps(fn)
    def wrapper(*args: object, **kwargs: object) -> object:
        import typer

        try:
            return inner(*args, **kwargs)
        except Exception as e:
            if _from_the_cli_library(e):
                raise
            _report(e)
        raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def _from_the_cli_library(e: Exception) -> bool:
    """typer's or click's own exception (an exit code, a usage error): they handle it.
    By module, not by class: typer 0.26-0.28 vendor click as ``typer._click``, others
    import the real one, and the light install has no ``click`` to import."""
    return any(c.__module__.split(".")[0] in ("click", "typer") for c in type(e).__mro__)


def _report(e: Exception) -> None:
    """One line on stderr for an error no code turned into an InputError."""
    if not isinstance(e, OSError):
        print_unexpected(e)
        return
    import typer

    where = "" if e.filename is None else f"{e.filename}: "
    typer.echo(terminal(f"error: {where}{os_reason(e)}"), err=True)


# Set (to anything but "" or "0") to get the traceback of an unexpected error.
DEBUG_ENV = "GEODIAG_DEBUG"


def os_reason(e: OSError) -> str:
    """What an OSError says went wrong, without the path it names ("Is a directory")."""
    return e.strerror or str(e) or type(e).__name__


def cannot_read(path: str | PathLike[str], e: OSError) -> InputError:
    """The InputError for an input that exists (or seems to) but cannot be read: a
    folder where a file belongs, a symlink loop, no permission, a name too long."""
    return InputError(path, f"cannot read ({os_reason(e)})")


def nested_too_deeply(path: str | PathLike[str], what: str = "JSON") -> InputError:
    """The InputError for JSON (or TOML) nested deeper than its parser's recursion limit."""
    return InputError(path, f"{what} nested too deeply to parse; truncated or corrupt?")


def print_unexpected(e: BaseException) -> None:
    """Report an error that is a bug in geodiag, not the user's input, on stderr: one
    line, after its traceback when ``GEODIAG_DEBUG`` is set."""
    import os
    import sys

    if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
        import traceback

        traceback.print_exception(type(e), e, e.__traceback__)
    text = str(e).splitlines()[0] if str(e) else ""
    what = f"{type(e).__name__}: {text}" if text else type(e).__name__
    hint = f"a bug in geodiag; rerun with {DEBUG_ENV}=1 for the traceback"
    print(terminal(f"error: unexpected {what} ({hint})"), file=sys.stderr)
