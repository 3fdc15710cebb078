"""Measuring: one checkpoint (or a pair) -> report dataclasses.

- ``checkpoint``: :func:`measure_checkpoint` (and ``drift``: :func:`measure_drift`), the numbers of
  every matrix (geometry, RSA, codebook health, neighbours) as ``CheckpointReport``;
- ``findings``: the row-by-row findings (untrained tokens, groups of identical rows);
- ``integrity``: checkpoint-level findings (tied heads that differ, padding rows, scale);
- ``audit``: the vocabulary audit, integrity findings too: tokenizer, config.json, embedding
  and head rows, a PEFT adapter's trained rows and a GGUF's token types against each other;
- ``rows``: the new rows, the reference sample, the padding rows, and ``MatrixRows``
  (what measuring a matrix read, for the callers that need the rows again);
- ``vocabulary``: the one walk of the original rows, each block handed to every consumer;

Imports ``io`` and ``metrics``, never ``gate`` or ``outputs``.
"""
