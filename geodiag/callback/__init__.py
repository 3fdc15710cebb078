"""The ``transformers.Trainer`` callback: :class:`GeodiagCallback` (``trainer``) watches the
new rows while a model trains and gates each checkpoint it saves. The only part of geodiag
that imports transformers at module level."""

from geodiag.callback.trainer import GeodiagCallback

__all__ = ["GeodiagCallback"]
