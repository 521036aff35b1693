r"""Deciding a claim over replicates: the one place where the book turns per-replicate numbers into a verdict.

A replicate is one independent draw of what a claim measures: a model trained under one seed, one synthetic
world, one prompt. A claim measured on ``n`` replicates ``x_1, ..., x_n`` is a claim about their mean, and the
chapters decide it with Student's :math:`t` (scipy's quantiles), the sample mean :math:`\bar x` and the sample
standard deviation :math:`s` (``ddof=1``):

* **two-sided** intervals at ``level``: :math:`\bar x \pm t_{(1+\text{level})/2,\,n-1}\, s/\sqrt n` of a mean
  (:func:`mean_interval`) or of the mean paired difference ``a - b`` (:func:`paired_interval`), or from a
  recorded mean, standard error and ``n`` (:func:`mean_interval_from_summary`); a check stricter than "the
  mean clears the margin" asks the interval's low end to clear it;
* **one-sided** bounds at ``level``: :math:`\bar x - t_{\text{level},\,n-1}\, s/\sqrt n`
  (:func:`mean_lower_one_sided`) and :math:`\bar x + t_{\text{level},\,n-1}\, s/\sqrt n`
  (:func:`mean_upper_one_sided`), for a claim that counts only when *established*; and the Wilson lower bound
  of a share of counted items pooled over the replicates (:func:`proportion_lower_one_sided`);
* **power**: :func:`replicates_needed`, the number of replicates that decides a claim with a given chance,
  from a pilot's spread and effect (the claims table's :meth:`~companion_lib.common.ClaimTable.design`);
* :func:`replicate_mean` (the mean over replicates, checked) and :func:`format_replicates` (the claims table's
  book column).

Every function checks its input: replicates must be finite numbers, an interval or a bound needs at least two
of them (or, for a one-sided bound, an explicit ``one_replicate`` value), paired samples must have the same
length, and ``level`` must lie in (0.5, 1). NaN entries are never dropped here; a caller that drops them
says so where it does.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

__all__ = ["mean_interval", "paired_interval", "mean_interval_from_summary", "mean_lower_one_sided",
           "mean_upper_one_sided", "proportion_lower_one_sided", "replicates_needed", "decision_power",
           "replicate_mean", "format_replicates"]


def _values(values, at_least: int, name: str = "values") -> np.ndarray:
    v = np.asarray(values, dtype=float).ravel()
    if v.size < at_least:
        need = {1: "one replicate", 2: "two replicates"}[at_least]
        raise ValueError(f"{name} must hold at least {need}, got {v.size}")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{name} must be finite (no NaN or infinity), got {v.tolist()}")
    return v


def _level(level: float) -> float:
    if isinstance(level, bool) or not isinstance(level, (int, float, np.integer, np.floating)):
        raise TypeError(f"level must be a number, got {level!r}")
    level = float(level)
    if not 0.5 < level < 1.0:
        raise ValueError(f"level must lie in (0.5, 1), got {level}")
    return level


def _half_width(v: np.ndarray, quantile: float) -> float:
    """:math:`t_{q,\\,n-1}\\, s/\\sqrt n` of the replicates ``v`` (at least two)."""
    return stats.t.ppf(quantile, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size)


def mean_interval(values, level: float = 0.95) -> tuple[float, float]:
    r"""Two-sided Student-:math:`t` confidence interval ``(low, high)`` of the mean of ``values``:
    :math:`\bar x \pm t_{(1+\text{level})/2,\,n-1}\, s/\sqrt n` (at least two finite values)."""
    v, level = _values(values, 2), _level(level)
    m, half = v.mean(), _half_width(v, (1 + level) / 2)
    return float(m - half), float(m + half)


def paired_interval(a, b, level: float = 0.95) -> tuple[float, float]:
    r"""Two-sided Student-:math:`t` confidence interval ``(low, high)`` of the mean paired difference
    ``a - b`` (pair ``i`` is ``a[i]`` and ``b[i]``, e.g. two methods on the same seed): :func:`mean_interval`
    of the differences."""
    a_, b_ = _values(a, 2, "a"), _values(b, 2, "b")
    if a_.shape != b_.shape:
        raise ValueError(f"a and b must pair up (the same number of replicates), got {a_.size} and {b_.size}")
    return mean_interval(a_ - b_, level)


def mean_interval_from_summary(mean, standard_error, n, level: float = 0.95):
    r"""Two-sided Student-:math:`t` interval ``(low, high)`` of a mean known only by its summary (a recorded
    run): :math:`\bar x \pm t_{(1+\text{level})/2,\,n-1}\,\mathrm{se}`, elementwise when the arguments are
    arrays (then ``low`` and ``high`` are arrays). ``n`` is the number of replicates behind each mean."""
    level = _level(level)
    m, se, k = np.asarray(mean, dtype=float), np.asarray(standard_error, dtype=float), np.asarray(n, dtype=float)
    if not (np.all(np.isfinite(m)) and np.all(np.isfinite(se))):
        raise ValueError("mean and standard_error must be finite (no NaN or infinity)")
    if np.any(se < 0):
        raise ValueError(f"standard_error must be >= 0, got {se.tolist()}")
    if not (np.all(np.isfinite(k)) and np.all(k == np.round(k)) and np.all(k >= 2)):
        raise ValueError(f"n must be a whole number of replicates, at least two, got {k.tolist()}")
    half = stats.t.ppf((1 + level) / 2, k - 1) * se
    low, high = m - half, m + half
    return (float(low), float(high)) if low.ndim == 0 else (low, high)


def _one_sided(values, level: float, one_replicate: float | None, sign: int) -> float:
    v, level = _values(values, 1 if one_replicate is not None else 2), _level(level)
    if v.size == 1:
        return float(one_replicate)
    return float(v.mean() + sign * _half_width(v, level))


def mean_lower_one_sided(values, level: float = 0.95, *, one_replicate: float | None = None) -> float:
    r"""One-sided lower confidence bound of the mean of ``values``: :math:`\bar x - t_{\text{level},\,n-1}\,
    s/\sqrt n`. It needs two values; with ``one_replicate`` given, a single value returns it instead (chapters
    16-17 pass ``-inf``: nothing is established from one world)."""
    return _one_sided(values, level, one_replicate, -1)


def mean_upper_one_sided(values, level: float = 0.95, *, one_replicate: float | None = None) -> float:
    r"""One-sided upper confidence bound of the mean of ``values``: :math:`\bar x + t_{\text{level},\,n-1}\,
    s/\sqrt n` (``one_replicate`` as in :func:`mean_lower_one_sided`; chapters 16-17 pass ``+inf``)."""
    return _one_sided(values, level, one_replicate, +1)


def proportion_lower_one_sided(successes: int, trials: int, level: float = 0.95) -> float:
    r"""One-sided Wilson lower confidence bound of a proportion ``successes / trials`` (items pooled over the
    replicates, e.g. hallucination heads in the upper layers out of all top heads of all seeds):
    :math:`\big(\hat p + \frac{z^2}{2n} - z\sqrt{\hat p(1-\hat p)/n + z^2/(4n^2)}\big)/(1 + z^2/n)` with
    :math:`z` the standard normal ``level`` quantile."""
    level = _level(level)
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


def _finite(value, name: str) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not math.isfinite(float(value)):
        raise ValueError(f"{name} must be finite, got {value}")
    return float(value)


def decision_power(n: int, spread: float, effect: float, margin: float, level: float = 0.95) -> float:
    r"""The chance that the two-sided ``level`` Student-:math:`t` interval of the mean of ``n`` replicates lies
    wholly on the side of ``margin`` where the true mean ``effect`` is, when the replicates scatter with
    standard deviation ``spread``: :math:`P(T > t_{(1+\text{level})/2,\,n-1})` for :math:`T` non-central
    :math:`t` with :math:`n-1` degrees of freedom and non-centrality :math:`|\text{effect}-\text{margin}|
    \sqrt n/\text{spread}` (``scipy.stats.nct``). A zero ``spread`` decides with certainty (power 1) unless the
    effect sits on the margin (power 0)."""
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 2:
        raise ValueError(f"n must be an int of at least two replicates, got {n!r}")
    spread, effect, margin, level = (_finite(spread, "spread"), _finite(effect, "effect"),
                                     _finite(margin, "margin"), _level(level))
    if spread < 0:
        raise ValueError(f"spread must be >= 0, got {spread}")
    gap = abs(effect - margin)
    if spread == 0:
        return 1.0 if gap > 0 else 0.0
    df = int(n) - 1
    return float(stats.nct.sf(stats.t.ppf((1 + level) / 2, df), df, gap * math.sqrt(n) / spread))


def replicates_needed(spread: float, effect: float, margin: float, level: float = 0.95, power: float = 0.8,
                      max_n: int = 100_000) -> int | None:
    r"""The smallest number of replicates whose two-sided ``level`` interval decides a claim (lies wholly on
    one side of ``margin``) with probability at least ``power``, for a true mean ``effect`` and a spread
    (standard deviation of one replicate) ``spread``, both usually a pilot's (:func:`decision_power`). ``None``
    when no number up to ``max_n`` does (an effect on, or nearly on, the margin)."""
    power = _finite(power, "power")
    if not 0 < power < 1:
        raise ValueError(f"power must lie in (0, 1), got {power}")
    if decision_power(2, spread, effect, margin, level) >= power:
        return 2
    if decision_power(max_n, spread, effect, margin, level) < power:
        return None
    lo, hi = 2, max_n                                  # power(lo) < power <= power(hi); power grows with n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if decision_power(mid, spread, effect, margin, level) >= power:
            hi = mid
        else:
            lo = mid
    return hi


def replicate_mean(values) -> float:
    """The mean of a statistic over the replicates (at least one finite value): what a claim declared to hold
    compares with its margin."""
    return float(_values(values, 1).mean())


def format_replicates(values, fmt: str) -> str:
    """``"a / b / c (mean m)"`` for the claims table's book column (at least one finite value)."""
    v = _values(values, 1)
    return " / ".join(format(x, fmt) for x in v) + f" (mean {format(float(v.mean()), fmt)})"
