"""How gti's commands end on bad input or an interruption (DESIGN.md exit codes).

``geodiag.errors.InputError`` -> one ``error: ...`` line on stderr, exit 2.
``Interrupted`` (a training stage stopped early with its resume state saved) -> one
``interrupted: ...`` line, exit 130; the same command resumes it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import TypeVar

from geodiag.errors import exits_on_bad_input as geodiag_exits_on_bad_input

F = TypeVar("F", bound=Callable[..., object])


class Interrupted(Exception):
    """Stopped before the last step; the state to resume from is saved."""

    def __init__(self, step: int, where: str) -> None:
        self.step = step
        super().__init__(f"stopped after step {step}; resume state in {where}")


def exits_on_bad_input(fn: F) -> F:
    """Wrap a typer command: InputError -> exit 2 (geodiag's decorator, the one place
    that maps it), Interrupted -> exit 130, one line each."""

    @geodiag_exits_on_bad_input
    @wraps(fn)
    def wrapper(*args: object, **kwargs: object) -> object:
        import typer

        try:
            return fn(*args, **kwargs)
        except Interrupted as e:
            typer.echo(f"interrupted: {e}; run the same command again to resume", err=True)
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]
