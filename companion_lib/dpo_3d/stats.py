r"""Confidence across replicate models: the robust form of a claim's check.

A claim measured on a handful of tiny models (one per seed) is a claim about the *mean* effect over
models. The check "the mean clears the margin" holds on a lucky set of seeds as easily as the effect
itself; the robust form asks that the lower end of a two-sided :math:`(1-\alpha)` Student-t interval
of the mean clear the same margin:

.. math:: \bar d - t_{1-\alpha/2,\,n-1}\,\frac{s_d}{\sqrt n} > m,

with :math:`d_i` the per-model values (a paired difference, or a log-ratio), :math:`\bar d` their
mean and :math:`s_d` their sample standard deviation.
"""

from __future__ import annotations

import numpy as np

__all__ = ["mean_lower_bound"]


def mean_lower_bound(values, level: float = 0.95) -> float:
    """Lower end of the two-sided ``level`` Student-t confidence interval of the mean of ``values``.

    ``values`` are per-model (per-seed) measurements, at least two, all finite.
    """
    from scipy import stats

    d = np.asarray(values, dtype=float).ravel()
    if d.size < 2:
        raise ValueError(f"values must hold at least 2 numbers, got {d.size}")
    if not np.isfinite(d).all():
        raise ValueError("values must be finite")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    half = stats.t.ppf(0.5 + level / 2, d.size - 1) * d.std(ddof=1) / np.sqrt(d.size)
    return float(d.mean() - half)
