"""The ``transformers.Trainer`` callback: :class:`GeodiagCallback` (``trainer``) watches the
new rows while a model trains and gates each checkpoint it saves. The only part of geodiag
that imports transformers at module level; without it the import says what to install."""

import importlib.util

if importlib.util.find_spec("transformers") is None:
    raise ImportError(
        "geodiag.callback needs transformers (the Trainer it hooks into): "
        "pip install transformers (and torch; see docs/training.md)"
    )

from geodiag.callback.trainer import GeodiagCallback  # noqa: E402

__all__ = ["GeodiagCallback"]
