"""The one error type a user can cause: bad input, and the one place a command turns it
into exit code 2 (``exits_on_bad_input``). A missing optional dependency group is one
kind of it (``require_extra``): the command names what to install, no traceback."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable
from functools import wraps
from os import PathLike
from typing import TypeVar

F = TypeVar("F", bound=Callable[..., object])


class InputError(Exception):
    """Bad input: names the file (or flag) at fault and what is wrong with it.

    ``str(err)`` is one line, ``"<where>: <problem>"``, fit to print as-is.
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
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]
