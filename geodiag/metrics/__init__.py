"""Pure metric functions over embedding rows: numpy only, so the CI gate starts fast.

One concept per module; import from them directly (``from geodiag.metrics.rsa import rsa``):
- ``geometry``: spectrum, scale and cosine structure of one matrix (``summarize``).
- ``rsa``: shared structure of two paired matrices (token rows vs codebook vectors).
- ``drift``: the same tokens in two checkpoints.
- ``neighbors``: nearest original-vocabulary rows, streamed.

Nothing is re-exported here: the functions ``rsa`` and ``drift`` would shadow their
modules as attributes of this package.
"""
