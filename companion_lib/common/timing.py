"""A small wall-clock timer for notebooks."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

__all__ = ["timer", "Timing"]


@dataclass
class Timing:
    """Elapsed wall time of a :func:`timer` block, in seconds (filled in when the block ends)."""

    label: str
    seconds: float = float("nan")


@contextmanager
def timer(label: str = "elapsed", verbose: bool = True) -> Iterator[Timing]:
    """Time a block: ``with timer("fit") as t: ...``; prints ``fit: 1.23 s`` unless ``verbose=False``."""
    if not isinstance(label, str):
        raise TypeError(f"label must be a str, got {type(label).__name__}")
    timing = Timing(label)
    start = time.perf_counter()
    try:
        yield timing
    finally:
        timing.seconds = time.perf_counter() - start
        if verbose:
            print(f"{label}: {timing.seconds:.2f} s")
