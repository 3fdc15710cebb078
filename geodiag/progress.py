"""Progress of a long task as lines on stderr: none while it is short, then one line every
so often (counting ``--data``, reading a remote file). The caller words each line; this
says when one is due."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from geodiag.escape import terminal

# When the progress lines of geodiag's long tasks are due, all in one place: the first once
# a task has run AFTER_S seconds (a shorter task prints nothing), then one every
# COUNTING_EVERY_S while counting --data (geodiag.io.usage), every READING_EVERY_S while
# reading a remote checkpoint (geodiag.io.sources.byte_ranges).
AFTER_S = 3.0
COUNTING_EVERY_S = 5.0
READING_EVERY_S = 10.0


def to_stderr(message: str) -> None:
    """One progress line on stderr, escaped for the terminal (a file name may be hostile)."""
    print(terminal(message), file=sys.stderr, flush=True)


class Progress:
    """A line is due once ``after`` seconds have passed since the start, then every
    ``every`` seconds; ``say`` prints it (default: :func:`to_stderr`)."""

    def __init__(
        self, after: float, every: float, say: Callable[[str], None] | None = None
    ) -> None:
        self.after, self.every = after, every
        self.say = say or to_stderr
        self.start = self.last = time.monotonic()
        self.shown = False  # a line was said

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def due(self) -> bool:
        """Whether a line is due now; True marks it said."""
        now = time.monotonic()
        if now - self.start < self.after or now - self.last < self.every * self.shown:
            return False
        self.last, self.shown = now, True
        return True
