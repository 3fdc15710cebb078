"""The one error type a user can cause: bad input. CLIs turn it into exit code 2."""

from __future__ import annotations

from os import PathLike


class InputError(Exception):
    """Bad input: names the file (or flag) at fault and what is wrong with it.

    ``str(err)`` is one line, ``"<where>: <problem>"``, fit to print as-is.
    """

    def __init__(self, where: str | PathLike[str], problem: str) -> None:
        self.where = str(where)
        self.problem = problem
        super().__init__(f"{self.where}: {problem}")
