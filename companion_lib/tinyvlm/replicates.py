r"""Claims over replicate worlds: one trained world per seed, the statistic of a claim measured on each.

A trained world is one draw from the recipe; its hallucination heads, its lens quality and its response
to an intervention vary from seed to seed. Chapters 16 and 17 therefore run several worlds (the
``seeds`` list of their reproduce pages) and decide every claim from the run's replicates:

* a claim declared to **hold** must hold *on average*: the mean over the run's seeds of each
  statistic clears its pre-registered margin (:func:`replicate_mean`), which is stricter in confidence
  than one seed at the same margin;
* a claim declared **not to reproduce** counts as unexpectedly holding only when it is *established*
  on the run's seeds: the one-sided 95% lower confidence bound of the mean (Student's :math:`t` over
  seeds, :func:`replicate_lower`; :func:`replicate_upper` for an upper margin), or for a share of
  counted items pooled over seeds the Wilson lower bound (:func:`proportion_lower`), clears the margin.
  A lucky seed set, on which the statistic scatters across the margin, cannot flip it.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

__all__ = ["replicate_mean", "replicate_lower", "replicate_upper", "proportion_lower", "format_replicates"]


def _values(values) -> np.ndarray:
    v = np.asarray(values, dtype=float).ravel()
    if v.size == 0:
        raise ValueError("values must hold at least one replicate")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"values must be finite, got {v.tolist()}")
    return v


def _check_level(level: float) -> float:
    level = float(level)
    if not 0.5 < level < 1.0:
        raise ValueError(f"level must lie in (0.5, 1), got {level}")
    return level


def replicate_mean(values) -> float:
    """The mean of a statistic over the run's replicates (one value per seed)."""
    return float(_values(values).mean())


def replicate_lower(values, level: float = 0.95) -> float:
    r"""One-sided lower confidence bound of the replicates' mean,
    :math:`\bar x - t_{n-1,\,\text{level}}\, s/\sqrt n`; ``-inf`` for a single replicate (nothing is
    established from one seed)."""
    v, level = _values(values), _check_level(level)
    if v.size == 1:
        return -math.inf
    return float(v.mean() - stats.t.ppf(level, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size))


def replicate_upper(values, level: float = 0.95) -> float:
    """One-sided upper confidence bound of the replicates' mean (``+inf`` for a single replicate)."""
    return -replicate_lower(-_values(values), level)


def proportion_lower(successes: int, trials: int, level: float = 0.95) -> float:
    r"""One-sided Wilson lower confidence bound of a proportion ``successes / trials`` (items pooled over
    the replicates, e.g. hallucination heads in the upper layers out of all top heads of all seeds)."""
    level = _check_level(level)
    for name, v in (("successes", successes), ("trials", trials)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError(f"{name} must be a non-negative int, got {v!r}")
    if trials == 0 or successes > trials:
        raise ValueError(f"need 0 <= successes <= trials and trials > 0, got {successes}/{trials}")
    z = stats.norm.ppf(level)
    p, n = successes / trials, trials
    centre = p + z * z / (2 * n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return float((centre - half) / (1 + z * z / n))


def format_replicates(values, fmt: str) -> str:
    """``"a / b / c (mean m)"`` for the claims table's book column."""
    v = _values(values)
    return " / ".join(format(x, fmt) for x in v) + f" (mean {format(float(v.mean()), fmt)})"
