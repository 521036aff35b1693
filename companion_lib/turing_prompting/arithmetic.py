r"""Numbers: the angle code of a position, the positional gaps it leaves, and the Transformer's two
arithmetic backends (float64 with scores rounded to ``bits`` binary places, :class:`FloatBackend`; exact
``decimal`` arithmetic, :class:`ExactBackend`).
"""

from __future__ import annotations

import decimal
from decimal import Decimal

import numpy as np

__all__ = ["angle_code", "position_gap", "FloatBackend", "ExactBackend"]


def angle_code(h) -> np.ndarray:
    r"""The "angle code" :math:`u(h) = (h, 1)/\sqrt{h^2+1}` that LN makes out of a prefix mean
    :math:`(h/p, 1/p)`. :math:`u(h)^\top u(h') = 1` iff :math:`h=h'`. Shape ``(..., 2)``."""
    h = np.asarray(h, dtype=float)
    r = np.sqrt(h * h + 1.0)
    return np.stack([h / r, 1.0 / r], axis=-1)


def position_gap(p) -> np.ndarray:
    r"""Positional feature :math:`1-u(p)^\top u(p+1) = 1-\frac{p(p+1)+1}{\sqrt{(p^2+1)((p+1)^2+1)}}`,
    the smallest similarity gap between neighbouring codes, computed stably as
    :math:`1/(\sqrt{a^2+1}(\sqrt{a^2+1}+a))` with :math:`a=p(p+1)+1` (it is :math:`\approx 1/(2p^4)`)."""
    p = np.asarray(p, dtype=float)
    if np.any(p < 0):
        raise ValueError("p must be non-negative")
    a = p * (p + 1.0) + 1.0
    r = np.sqrt(a * a + 1.0)
    return 1.0 / (r * (r + a))


class FloatBackend:
    """Hardware floating point (``float64``, or ``longdouble`` = 64-bit mantissa on x86).

    Attention scores are rounded to multiples of :math:`2^{-\\text{bits}}` before the hardmax compares
    them, and LN treats a vector as zero when it rounds to zero (the official code does the same with
    ``fp_round`` decimal places). ``bits`` must stay a few bits below the format's own resolution:
    about 46 for float64 and 58 for longdouble, else the format's rounding noise decides ties.
    """

    def __init__(self, bits: int = 46, dtype=np.float64) -> None:
        if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)):
            raise TypeError(f"bits must be an int, got {type(bits).__name__}")
        if np.dtype(dtype) not in (np.dtype(np.float64), np.dtype(np.longdouble)):
            raise ValueError(f"dtype must be float64 or longdouble, got {dtype}")
        self.dtype = np.dtype(dtype).type
        limit = np.finfo(self.dtype).nmant
        if not 1 <= bits <= limit:
            raise ValueError(f"bits must be in 1..{limit} for {np.dtype(dtype).name}, got {bits}")
        self.bits = int(bits)
        self._scale = self.dtype(2) ** self.bits
        self.step = self.dtype(1) / self._scale

    def __repr__(self) -> str:
        return f"FloatBackend(bits={self.bits}, dtype={np.dtype(self.dtype).name})"

    def const(self, v):
        return self.dtype(v)

    def zeros(self, n: int) -> np.ndarray:
        return np.zeros(n, dtype=self.dtype)

    def from_ints(self, v) -> np.ndarray:
        return np.asarray(v).astype(self.dtype)

    def quantize(self, s: np.ndarray) -> np.ndarray:
        return np.round(s * self._scale) / self._scale

    def sqrt(self, v: np.ndarray) -> np.ndarray:
        return np.sqrt(v)

    def position_features(self, p: np.ndarray):
        p = p.astype(self.dtype)
        one = self.dtype(1)
        r = np.sqrt(p * p + one)
        a = p * (p + one) + one
        ra = np.sqrt(a * a + one)
        return one / p, one / (ra * (ra + a)), p / r, one / r

    def context(self):
        import contextlib
        return contextlib.nullcontext()


class ExactBackend:
    """Arbitrary-precision arithmetic with :mod:`decimal` (``digits`` significant digits, like the
    official ``fp_round + fp_guard``); scores are rounded to multiples of :math:`2^{-\\text{bits}}`.
    Slow (Python objects), exact enough to cross-check the float64 backend."""

    dtype = object

    def __init__(self, bits: int = 96, digits: int = 60) -> None:
        for name, v in (("bits", bits), ("digits", digits)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"{name} must be an int, got {type(v).__name__}")
        if bits < 1:
            raise ValueError(f"bits must be >= 1, got {bits}")
        if digits < int(bits * 0.302) + 10:
            raise ValueError(f"digits={digits} is too few to round exactly at bits={bits}; "
                             f"use digits >= {int(bits * 0.302) + 10}")
        self.bits, self.digits = int(bits), int(digits)
        self._ctx = decimal.Context(prec=self.digits, rounding=decimal.ROUND_HALF_EVEN)
        with decimal.localcontext(self._ctx):
            self._scale = Decimal(2) ** self.bits
            self.step = Decimal(1) / self._scale
        self._q = np.frompyfunc(self._quantize_one, 1, 1)
        self._sqrt = np.frompyfunc(lambda v: Decimal(v).sqrt(), 1, 1)

    def __repr__(self) -> str:
        return f"ExactBackend(bits={self.bits}, digits={self.digits})"

    def _quantize_one(self, v):
        return (Decimal(v) * self._scale).to_integral_value(decimal.ROUND_HALF_EVEN) / self._scale

    def const(self, v) -> Decimal:
        return Decimal(v)

    def zeros(self, n: int) -> np.ndarray:
        out = np.empty(n, dtype=object)
        out[:] = Decimal(0)
        return out

    def from_ints(self, v) -> np.ndarray:
        arr = np.asarray(v)
        out = np.empty(arr.shape, dtype=object)
        out.flat[:] = [Decimal(int(a)) for a in arr.flat]
        return out

    def quantize(self, s: np.ndarray) -> np.ndarray:
        return self._q(s)

    def sqrt(self, v: np.ndarray) -> np.ndarray:
        return self._sqrt(v)

    def position_features(self, p: np.ndarray):
        p = self.from_ints(p)
        one = Decimal(1)
        a = p * (p + one) + one
        r = self._sqrt(a * a + one)
        rp = self._sqrt(p * p + one)
        return one / p, one / (r * (r + a)), p / rp, one / rp

    def context(self):
        return decimal.localcontext(self._ctx)
