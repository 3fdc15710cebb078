"""Pure metric functions over embedding rows: numpy only, so the CI gate starts fast.

One concept per module; import from them directly (``from geodiag.metrics.rsa import rsa``):
- ``blas``: how many BLAS threads a product may use.
- ``geometry``: spectrum, scale and mean cosine of one matrix (``summarize``).
- ``cosine``: cosine within and between groups of rows (levels, map blocks), cosine maps.
- ``rsa``: shared structure of two paired matrices (token rows vs codebook vectors).
- ``drift``: the same tokens in two checkpoints.
- ``neighbors``: nearest original-vocabulary rows, streamed.
- ``codebook``: how the items use the codes (dead codes, collisions).
- ``untrained``: row-by-row findings: rows at their init, the vocabulary's statistics.
- ``quantization``: what a GGUF conversion did to the new rows.
- ``snapshot``: the callback's cheap figures of one step.

Nothing is re-exported here: the functions ``rsa`` and ``drift`` would shadow their
modules as attributes of this package.
"""
