"""Thread settings for small CPU work.

On a 2-core machine, small linear-algebra solves ran 10-20x slower with two BLAS threads than with
one (the threads fight over the cores, and with two notebooks running at once, over each other).
Notebooks therefore call :func:`limit_threads` once, which defaults to one thread.
"""

from __future__ import annotations

import os

from threadpoolctl import threadpool_limits

__all__ = ["limit_threads", "default_threads"]

_ENV_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def default_threads() -> int:
    """The thread count from ``$BOOK_NUM_THREADS`` (a positive integer), or 1."""
    raw = os.environ.get("BOOK_NUM_THREADS", "1")
    try:
        n = int(raw)
    except ValueError:
        raise ValueError(f"BOOK_NUM_THREADS must be a positive integer, got {raw!r}") from None
    if n < 1:
        raise ValueError(f"BOOK_NUM_THREADS must be a positive integer, got {raw!r}")
    return n


def limit_threads(n: int | None = None) -> int:
    """Limit BLAS/OpenMP pools and PyTorch's intra-op pool to ``n`` threads for this process.

    Parameters
    ----------
    n:
        Number of threads; ``None`` reads :func:`default_threads`.

    Returns
    -------
    int
        The number of threads now in force.
    """
    if n is None:
        n = default_threads()
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"n must be an int or None, got {type(n).__name__}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    for var in _ENV_VARS:  # inherited by any subprocess the notebook starts
        os.environ[var] = str(n)
    threadpool_limits(limits=n)  # not used as a context manager: the limit stays in force
    try:
        import torch
    except ImportError:  # pragma: no cover
        pass
    else:
        torch.set_num_threads(n)
    return n
