"""Evaluation of next-item generation: ``gti evaluate``.

:mod:`gti.evaluate.trie` (the SID prefix trie as tensors), :mod:`gti.evaluate.decode`
(batched trie-constrained beam search, exact full-catalog scoring),
:mod:`gti.evaluate.metrics` (Recall@K, NDCG@K), :func:`gti.evaluate.run.run_evaluate`.
"""
