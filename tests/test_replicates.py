"""companion_lib.common.replicates: agreement with scipy and the closed forms, the numbers of the functions it
replaced (tinyvlm's replicate bounds, chapter 10's mean_lower_bound, chapter 13's mean_ci, the bodies of
attribot's and infomorphic_neurons' paired_interval), and the input checks."""

import math

import numpy as np
import pytest
from scipy import stats

from companion_lib.common import replicates as rep

X = [0.12, -0.03, 0.27, 0.08, 0.19]
Y = [0.4, 0.1, 0.35]


def _samples(n_cases=300, seed=0):
    rng = np.random.default_rng(seed)
    for _ in range(n_cases):
        n = int(rng.integers(2, 60))
        level = float(rng.choice([0.8, 0.9, 0.95, 0.975, 0.99, rng.uniform(0.51, 0.999)]))
        yield rng.normal(rng.normal(), rng.uniform(0.01, 3.0), n), level


# -- agreement with scipy and the closed forms ---------------------------------------------------------
def test_mean_interval_is_scipys_t_interval():
    for x, level in _samples():
        low, high = rep.mean_interval(x, level)
        ci = stats.ttest_1samp(x, 0.0).confidence_interval(level)
        assert (low, high) == pytest.approx((ci.low, ci.high), rel=1e-12, abs=1e-12)
        t_low, t_high = stats.t.interval(level, len(x) - 1, loc=x.mean(), scale=stats.sem(x))
        assert (low, high) == pytest.approx((t_low, t_high), rel=1e-12, abs=1e-12)


def test_paired_interval_is_scipys_paired_t_interval():
    rng = np.random.default_rng(1)
    for x, level in _samples():
        b = x + rng.normal(0.2, 0.5, len(x))
        ci = stats.ttest_rel(x, b).confidence_interval(level)
        assert rep.paired_interval(x, b, level) == pytest.approx((ci.low, ci.high), rel=1e-12, abs=1e-12)
        assert rep.paired_interval(x, b, level) == rep.mean_interval(x - b, level)


def test_interval_from_a_summary_is_the_interval_of_the_values():
    for x, level in _samples():
        se = x.std(ddof=1) / np.sqrt(x.size)
        assert rep.mean_interval_from_summary(x.mean(), se, x.size, level) == pytest.approx(
            rep.mean_interval(x, level), rel=1e-12, abs=1e-12)
    # elementwise over recorded runs (chapter 12's design history): arrays in, arrays out, same bits as
    # mean - t * se written out
    m, se, n = np.array([0.037, 0.072, 0.014]), np.array([0.024, 0.024, 0.025]), np.array([119, 118, 116])
    low, high = rep.mean_interval_from_summary(m, se, n, 0.99)
    assert np.array_equal(low, m - stats.t.ppf(0.5 + 0.99 / 2, n - 1) * se)
    assert np.array_equal(high, m + stats.t.ppf(0.5 + 0.99 / 2, n - 1) * se)
    assert isinstance(rep.mean_interval_from_summary(0.1, 0.02, 10)[0], float)


def test_one_sided_bounds_are_scipys_one_sided_t_bounds():
    for x, level in _samples():
        greater = stats.ttest_1samp(x, 0.0, alternative="greater").confidence_interval(level)
        less = stats.ttest_1samp(x, 0.0, alternative="less").confidence_interval(level)
        assert rep.mean_lower_one_sided(x, level) == pytest.approx(greater.low, rel=1e-12, abs=1e-12)
        assert rep.mean_upper_one_sided(x, level) == pytest.approx(less.high, rel=1e-12, abs=1e-12)
        # a one-sided bound at level is the end of the two-sided interval at 2 level - 1
        if level > 0.75:
            low, high = rep.mean_interval(x, 2 * level - 1)
            assert rep.mean_lower_one_sided(x, level) == pytest.approx(low, rel=1e-12, abs=1e-12)
            assert rep.mean_upper_one_sided(x, level) == pytest.approx(high, rel=1e-12, abs=1e-12)


def test_wilson_bound_is_scipys_wilson_interval_and_solves_the_score_equation():
    for k, n, level in [(9, 9, 0.95), (8, 9, 0.95), (0, 5, 0.95), (7, 12, 0.9), (40, 100, 0.99), (1, 1, 0.6)]:
        lower = rep.proportion_lower_one_sided(k, n, level)
        two_sided = stats.binomtest(k, n).proportion_ci(confidence_level=2 * level - 1, method="wilson")
        assert lower == pytest.approx(two_sided.low, abs=1e-12)
        if 0 < k:  # the lower root of (p_hat - p)^2 = z^2 p (1 - p) / n
            z, p_hat = stats.norm.ppf(level), k / n
            assert (p_hat - lower) ** 2 == pytest.approx(z * z * lower * (1 - lower) / n, rel=1e-9)
    # all 9 of 9 gives about 0.77; 8 of 9 stays below 2/3 (chapter 16's margin)
    assert rep.proportion_lower_one_sided(9, 9) == pytest.approx(0.769, abs=2e-3)
    assert rep.proportion_lower_one_sided(8, 9) < 2 / 3 < rep.proportion_lower_one_sided(9, 9)
    assert rep.proportion_lower_one_sided(0, 5) == pytest.approx(0.0, abs=1e-12)
    assert rep.proportion_lower_one_sided(np.int64(3), np.int64(4)) == rep.proportion_lower_one_sided(3, 4)


def test_small_cases():
    half = stats.t.ppf(0.975, 2) * 0.1 / math.sqrt(3)          # t_{0.975, 2} s / sqrt(n)
    assert rep.mean_interval([0.1, 0.2, 0.3]) == pytest.approx((0.2 - half, 0.2 + half))
    assert rep.mean_interval([1.0, 1.0, 1.0]) == (1.0, 1.0)
    assert rep.mean_lower_one_sided([0.5, 0.5, 0.5]) == pytest.approx(0.5)
    assert rep.mean_interval(X, 0.8)[0] > rep.mean_interval(X)[0] > rep.mean_interval(X, 0.99)[0]
    assert rep.replicate_mean([0.2, 0.3, 0.4]) == pytest.approx(0.3)
    assert rep.replicate_mean([7]) == 7.0
    assert rep.format_replicates([1, 2], ".1f") == "1.0 / 2.0 (mean 1.5)"
    assert rep.format_replicates(np.array([[0.25]]), ".2f") == "0.25 (mean 0.25)"
    # a single replicate: a one-sided bound only with an explicit value for it
    assert rep.mean_lower_one_sided([0.5], one_replicate=-np.inf) == -np.inf
    assert rep.mean_upper_one_sided([0.5], one_replicate=np.inf) == np.inf
    assert rep.mean_lower_one_sided(X, one_replicate=-np.inf) == rep.mean_lower_one_sided(X)


# -- the replaced functions' numbers, bit for bit ------------------------------------------------------
def test_numbers_of_the_replaced_functions():
    # tinyvlm's replicate_lower / replicate_upper / replicate_mean / proportion_lower
    assert rep.mean_lower_one_sided(X) == 0.018009807535718042
    assert rep.mean_lower_one_sided(Y, 0.9) == 0.10835538057751526
    assert rep.mean_upper_one_sided(X) == 0.23399019246428196
    assert rep.mean_upper_one_sided(Y, 0.9) == 0.4583112860891514
    assert rep.replicate_mean(X) == 0.126
    assert rep.proportion_lower_one_sided(9, 9) == 0.7688664806802434
    assert rep.proportion_lower_one_sided(7, 12, 0.9) == 0.40194889264587796
    # chapter 10's mean_lower_bound (the low end of the two-sided interval)
    assert rep.mean_interval(X)[0] == -0.014642771891432926
    assert rep.mean_interval(Y, 0.99)[0] == -0.6376531380124781
    # chapter 13's mean_ci (NaN dropped by the caller) and infomorphic_neurons' paired_interval: (mean, low, high)
    assert rep.mean_interval(X) == (-0.014642771891432926, 0.26664277189143293)
    assert rep.mean_interval(Y, 0.9) == (0.012370139095483235, 0.5542965275711834)


def test_the_replaced_formulas_on_random_replicates():
    """The old code, written out: every replaced t formula gives the same bits, except attribot's, which
    multiplied t by the rounded standard error (the same interval up to the last bit)."""
    for x, level in _samples(2000, seed=2):
        n, m, s = x.size, x.mean(), x.std(ddof=1)
        low, high = rep.mean_interval(x, level)
        half = stats.t.ppf((1 + level) / 2, n - 1) * s / np.sqrt(n)                  # sae, infomorphic
        assert (low, high) == (float(m - half), float(m + half))
        assert low == float(m - stats.t.ppf(0.5 + level / 2, n - 1) * s / np.sqrt(n))  # chapter 10
        one = stats.t.ppf(level, n - 1) * s / math.sqrt(n)                             # tinyvlm
        assert rep.mean_lower_one_sided(x, level) == float(m - one)
        assert rep.mean_upper_one_sided(x, level) == -float(-m - one)
        se = float(s / np.sqrt(n))                                                     # attribot
        half_ab = float(stats.t.ppf(0.5 + level / 2, n - 1)) * se
        assert abs(low - (float(m) - half_ab)) <= 2 * np.spacing(abs(low) + abs(float(m)))
        assert abs(high - (float(m) + half_ab)) <= 2 * np.spacing(abs(high) + abs(float(m)))


# -- input checks --------------------------------------------------------------------------------------
@pytest.mark.parametrize("fn", [rep.mean_interval, rep.mean_lower_one_sided, rep.mean_upper_one_sided])
def test_bad_replicates(fn):
    for too_few in ([], [1.0], np.array([[2.0]])):
        with pytest.raises(ValueError, match="at least two"):
            fn(too_few)
    for bad in ([1.0, np.nan, 2.0], [1.0, np.inf], [-np.inf, 0.0, 1.0]):
        with pytest.raises(ValueError, match="finite"):
            fn(bad)
    for level in (0.5, 1.0, 0.3, 1.5, -0.95, 95):
        with pytest.raises(ValueError, match=r"level must lie in \(0.5, 1\)"):
            fn(X, level)
    for level in (True, "0.95", None):
        with pytest.raises(TypeError, match="level must be a number"):
            fn(X, level)


def test_bad_pairs():
    with pytest.raises(ValueError, match="pair up"):
        rep.paired_interval([1.0, 2.0, 3.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="a must hold at least two"):
        rep.paired_interval([1.0], [2.0])
    with pytest.raises(ValueError, match="b must be finite"):
        rep.paired_interval([1.0, 2.0], [np.nan, 1.0])
    with pytest.raises(ValueError, match="level"):
        rep.paired_interval(X, X, level=1.0)


def test_bad_summaries():
    with pytest.raises(ValueError, match="n must be a whole number of replicates, at least two"):
        rep.mean_interval_from_summary(0.1, 0.02, 1)
    with pytest.raises(ValueError, match="n must be a whole number"):
        rep.mean_interval_from_summary([0.1, 0.2], [0.02, 0.02], [10, 2.5])
    with pytest.raises(ValueError, match="standard_error must be >= 0"):
        rep.mean_interval_from_summary(0.1, -0.02, 10)
    with pytest.raises(ValueError, match="finite"):
        rep.mean_interval_from_summary(np.nan, 0.02, 10)
    with pytest.raises(ValueError, match="level"):
        rep.mean_interval_from_summary(0.1, 0.02, 10, level=0.4)


def test_bad_single_replicate_and_means():
    with pytest.raises(ValueError, match="at least one"):
        rep.mean_lower_one_sided([], one_replicate=-np.inf)
    with pytest.raises(ValueError, match="finite"):
        rep.mean_lower_one_sided([np.nan], one_replicate=-np.inf)
    with pytest.raises(ValueError, match="level"):
        rep.mean_upper_one_sided([0.5], level=0.2, one_replicate=np.inf)
    for fn in (rep.replicate_mean, lambda v: rep.format_replicates(v, ".2f")):
        with pytest.raises(ValueError, match="at least one"):
            fn([])
        with pytest.raises(ValueError, match="finite"):
            fn([0.1, np.nan])


def test_bad_proportions():
    with pytest.raises(ValueError, match="successes"):
        rep.proportion_lower_one_sided(4, 3)
    with pytest.raises(ValueError, match="trials must be"):
        rep.proportion_lower_one_sided(1, -1)
    with pytest.raises(ValueError, match="trials > 0"):
        rep.proportion_lower_one_sided(0, 0)
    with pytest.raises(ValueError, match="successes must be"):
        rep.proportion_lower_one_sided(1.5, 3)
    with pytest.raises(ValueError, match="successes must be"):
        rep.proportion_lower_one_sided(True, 3)
    with pytest.raises(ValueError, match="level"):
        rep.proportion_lower_one_sided(1, 3, level=0.4)


# -- power: how many replicates decide a claim ----------------------------------------------------------
def test_decision_power_matches_a_monte_carlo_of_the_interval_rule():
    rng = np.random.default_rng(0)
    n, spread, effect, margin = 6, 1.0, 1.2, 0.0
    draws = rng.normal(effect, spread, size=(20000, n))
    lows = np.array([rep.mean_interval(d)[0] for d in draws[:4000]])
    simulated = float(np.mean(lows > margin))
    assert rep.decision_power(n, spread, effect, margin) == pytest.approx(simulated, abs=0.02)


def test_replicates_needed_is_the_smallest_n_with_the_power():
    n = rep.replicates_needed(1.0, 0.8, 0.0)
    assert rep.decision_power(n, 1.0, 0.8, 0.0) >= 0.8 > rep.decision_power(n - 1, 1.0, 0.8, 0.0)
    # closed-form check for large n: the normal approximation (z_{0.975} + z_{0.8})^2 / d^2
    big = rep.replicates_needed(1.0, 0.1, 0.0)
    assert big == pytest.approx((stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) ** 2 / 0.1 ** 2, rel=0.02)
    assert rep.replicates_needed(1.0, -0.8, 0.0) == n            # symmetric: either side of the margin
    assert rep.replicates_needed(0.0, 0.3, 0.0) == 2 and rep.replicates_needed(1.0, 0.0, 0.0) is None
    assert rep.replicates_needed(1.0, 0.8, 0.0, power=0.95) > n


@pytest.mark.parametrize("kwargs, match", [(dict(spread=-1.0), "spread"), (dict(effect=float("nan")), "effect"),
                                           (dict(power=1.0), "power"), (dict(level=0.3), "level")])
def test_replicates_needed_rejects_bad_input(kwargs, match):
    args = dict(spread=1.0, effect=0.5, margin=0.0)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        rep.replicates_needed(**args)
