"""How many BLAS threads the metrics use.

Most products here are small (a few hundred tokens): OpenBLAS threads then cost more
than they give, and on a busy machine their spin-waits made a 1000 x 576 SVD take 4 s
instead of 0.13 s (measured on the 2-core CI kind). The analysis therefore runs
single-threaded, and only the large Gram product of the scale path asks for all cores.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager


def blas_threads(n: int | None) -> AbstractContextManager:
    """Context limiting BLAS to ``n`` threads (``None``: all cores)."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=n or os.cpu_count() or 1, user_api="blas")
