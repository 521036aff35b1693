"""Input validation shared by the chapter modules: arguments are checked at the boundary, and the
error names the argument and the value expected.

The messages are the ones the chapter modules used before these helpers were shared, so a chapter's
tests that match on them keep passing::

    >>> check_int(3, "n_rounds", low=1)
    3
    >>> check_positive_int(0, "n")
    Traceback (most recent call last):
    ...
    ValueError: n must be >= 1, got 0
"""

from __future__ import annotations

import gzip
import json
import numbers
from collections.abc import Iterator
from pathlib import Path

import numpy as np

__all__ = ["check_int", "check_positive_int", "check_positive", "check_probability", "check_finite_vector",
           "json_lines"]


def check_int(value: object, name: str, low: int | None = None) -> int:
    """``value`` as an ``int`` (Python or NumPy integer, never a bool), at least ``low`` when given.

    Raises ``TypeError("<name> must be an int, got <type>")`` or ``ValueError("<name> must be >= <low>,
    got <value>")``.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if low is not None and value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    return int(value)


def check_positive_int(value: object, name: str) -> int:
    """``value`` as an ``int`` >= 1 (a size, a count of steps or seeds)."""
    return check_int(value, name, low=1)


def check_positive(value: object, name: str) -> float:
    """``value`` as a positive finite ``float`` (a rate, a temperature, a regularisation weight)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not (np.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite number, got {value}")
    return float(value)


def check_probability(value: object, name: str, *, include_zero: bool = True, include_one: bool = True) -> float:
    """``value`` as a ``float`` in ``[0, 1]`` (ends excluded on request)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    low_ok = value >= 0 if include_zero else value > 0
    high_ok = value <= 1 if include_one else value < 1
    if not (np.isfinite(value) and low_ok and high_ok):
        interval = ("[" if include_zero else "(") + "0, 1" + ("]" if include_one else ")")
        raise ValueError(f"{name} must be in {interval}, got {value}")
    return float(value)


def check_finite_vector(a: object, name: str, n: int | None = None) -> np.ndarray:
    """``a`` as a finite 1-D float array (of length ``n`` when given)."""
    a = np.asarray(a, dtype=float)
    if a.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array, got shape {a.shape}")
    if n is not None and a.shape[0] != n:
        raise ValueError(f"{name} must have length {n}, got {a.shape[0]}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    return a


def json_lines(path: str | Path, expected: str) -> Iterator[tuple[str, dict]]:
    """The JSON objects of a JSON-lines file (gzipped when its name ends in ``.gz``), one per non-blank line,
    each with where it was (``"line 3 of 'path'"``) for the caller's own format errors.

    A line that is not JSON, or not a JSON object, stops with ``ValueError`` naming the line and ``expected``
    (the format the caller reads). Reading is lazy: a caller that needs the first lines reads only those."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"line {number} of {str(path)!r}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where} is not JSON ({exc.msg}); expected {expected}") from None
            if not isinstance(record, dict):
                raise ValueError(f"{where} is a JSON {type(record).__name__}, not an object; expected {expected}")
            yield where, record
