"""geodiag: geometry diagnostics for new-token embeddings.

``import geodiag`` stays light (no numpy work, no torch, no transformers): ``measure``
and ``check`` load :mod:`geodiag.api` on first use.
"""

__version__ = "0.1.0"
__all__ = ["__version__", "check", "measure"]


def __getattr__(name: str):
    if name in ("measure", "check"):
        from geodiag import api

        return getattr(api, name)
    raise AttributeError(f"module 'geodiag' has no attribute {name!r}")
