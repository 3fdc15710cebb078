"""The one error type a user can cause: bad input, and the one place a command turns it
into exit code 2 (``exits_on_bad_input``)."""

from __future__ import annotations

from collections.abc import Callable
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
