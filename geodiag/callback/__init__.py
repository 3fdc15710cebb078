"""The ``transformers.Trainer`` callback: :class:`GeodiagCallback` (``trainer``) watches the
new rows while a model trains and gates each checkpoint it saves. The only part of geodiag
that imports transformers at module level.

- ``trainer``: the callback, its Trainer hooks and the trajectory file;
- ``snapshots``: the figures of one snapshot, what its alarms say, the log entries;
- ``checkpoints``: each saved checkpoint described (sidecar, codebooks) and gated;
- ``distributed``: the ranks that do not measure join the embedding's gather.
"""

from geodiag.callback.trainer import GeodiagCallback

__all__ = ["GeodiagCallback"]
