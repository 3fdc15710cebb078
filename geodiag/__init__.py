"""geodiag: geometry diagnostics for new-token embeddings.

``import geodiag`` stays light (no numpy, no torch, no transformers): ``measure`` and
``check`` load :mod:`geodiag.api` on first use.
"""

from typing import TYPE_CHECKING

from geodiag.version import __version__

__all__ = ["__version__", "check", "measure"]

if TYPE_CHECKING:  # for type checkers and IDEs; at run time they load lazily below
    from geodiag.api import check, measure


def __getattr__(name: str):
    if name in ("measure", "check"):
        from geodiag import api

        return getattr(api, name)
    raise AttributeError(f"module 'geodiag' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), "check", "measure"])
