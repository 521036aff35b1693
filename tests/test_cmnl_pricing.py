"""Unit tests of companion_lib.cmnl_pricing (censored MNL assortment and pricing, Kim and Oh 2025)."""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import pytest

from companion_lib import cmnl_pricing as cp
from companion_lib.cmnl_pricing import policies


@pytest.fixture
def env():
    return cp.make_environment(N=6, d=3, K=3, rng=np.random.default_rng(0))


def test_make_environment_ranges(env):
    assert env.X.shape == env.W.shape == (6, 3)
    np.testing.assert_allclose(np.linalg.norm(env.X, axis=1), 1.0)
    np.testing.assert_allclose(np.linalg.norm(env.theta_v), 1.0)
    assert np.all((env.v >= 0) & (env.v <= 1)) and np.all((env.alpha >= 0) & (env.alpha <= 1))
    assert env.N == 6 and env.d == 3 and env.K == 3


def test_probabilities_sum_and_closed_form(env):
    mask = np.array([1, 1, 0, 1, 0, 0], bool)
    prices = 0.5 * env.v
    q = env.probabilities(mask, prices)
    e = np.exp(env.v - env.alpha * prices) * mask
    np.testing.assert_allclose(q, e / (1 + e.sum()))
    assert 0 < q.sum() < 1
    assert np.all(q[~mask] == 0)


def test_censoring_zeroes_overpriced_products(env):
    mask = np.ones(6, bool)
    prices = env.v.copy()
    prices[2] += 1e-9                       # just above the valuation
    q = env.probabilities(mask, prices)
    assert q[2] == 0.0 and np.all(q[np.arange(6) != 2] > 0)
    # censoring everything: no purchase for sure, zero revenue
    assert env.revenue(mask, env.v + 0.1) == 0.0


def test_batched_probabilities_match_single(env):
    masks = cp.all_assortments(6, 3)
    prices = 0.7 * env.v
    Q = env.probabilities(masks, prices)
    for m in (0, 7, len(masks) - 1):
        np.testing.assert_allclose(Q[m], env.probabilities(masks[m], prices))
    np.testing.assert_allclose(env.revenue(masks, prices), Q @ prices)


def test_sample_choice_frequencies(env):
    rng = np.random.default_rng(1)
    mask = np.array([1, 0, 1, 1, 0, 0], bool)
    prices = 0.8 * env.v
    draws = np.array([env.sample_choice(mask, prices, rng) for _ in range(20000)])
    q = env.probabilities(mask, prices)
    for i in range(6):
        assert abs(np.mean(draws == i) - q[i]) < 0.015
    assert abs(np.mean(draws == -1) - (1 - q.sum())) < 0.015


def test_all_assortments_counts():
    masks = cp.all_assortments(5, 2)
    assert masks.shape == (5 + 10, 5)
    assert masks.sum(axis=1).max() == 2 and masks.sum(axis=1).min() == 1
    assert len({tuple(m) for m in masks}) == len(masks)


def test_revenue_gradient_matches_finite_differences(env):
    mask = np.array([1, 1, 1, 0, 0, 0], bool)
    prices = 0.6 * env.v
    g = cp.revenue_price_gradient(env.v, env.alpha, prices, mask)
    for i in range(3):
        h = 1e-6
        up, dn = prices.copy(), prices.copy()
        up[i] += h
        dn[i] -= h
        fd = (env.revenue(mask, up) - env.revenue(mask, dn)) / (2 * h)
        assert abs(fd - g[i]) < 1e-6
    assert np.all(g[:3] > 0)                 # revenue increases up to the valuation (eq. 5)


def test_oracle_matches_brute_force_over_sizes_and_prices(env):
    S, p, R = env.optimum()
    np.testing.assert_allclose(p, env.v)
    best = max(env.revenue(np.isin(np.arange(6), c), env.v)
               for k in (1, 2, 3) for c in combinations(range(6), k))
    assert math.isclose(R, best)
    # no random price vector (for the same set) beats p = v
    rng = np.random.default_rng(2)
    for _ in range(200):
        assert env.revenue(S, rng.uniform(0, 1, 6)) <= R + 1e-12


def test_topk_is_a_heuristic_not_worse_than_any_size_k_set_much(env):
    w = np.exp(env.v - env.alpha * env.v)
    top = cp.topk_assortment(env.v, w, 3)
    assert top.sum() == 3
    exact = cp.best_assortment(env.v, w, cp.all_assortments(6, 3))
    assert env.revenue(top, env.v) <= env.revenue(exact, env.v) + 1e-12


def test_kappa_positive_and_small(env):
    k = cp.kappa(env.v, env.alpha, env.v, cp.all_assortments(6, 3))
    assert 0 < k < 0.25


def test_mnl_fisher_is_hessian_of_loglik():
    rng = np.random.default_rng(3)
    Z, theta = rng.normal(size=(4, 3)), rng.normal(size=3)

    def nll(th):
        u = Z @ th
        return -0.0 + np.log1p(np.exp(u).sum())      # no-purchase observation

    q, H = cp.mnl_fisher(Z, theta)
    np.testing.assert_allclose(q, np.exp(Z @ theta) / (1 + np.exp(Z @ theta).sum()))
    h = 1e-4
    num = np.zeros((3, 3))
    for a in range(3):
        for b in range(3):
            e_a, e_b = np.eye(3)[a] * h, np.eye(3)[b] * h
            num[a, b] = (nll(theta + e_a + e_b) - nll(theta + e_a - e_b) - nll(theta - e_a + e_b)
                         + nll(theta - e_a - e_b)) / (4 * h * h)
    np.testing.assert_allclose(H, num, atol=1e-5)
    assert np.all(np.linalg.eigvalsh(H) >= -1e-12)


def _uncensored_data(env, n, rng):
    """Random size-K offers at prices below valuation (so the feedback is a plain MNL)."""
    Zs, cs = [], []
    for _ in range(n):
        idx = np.sort(rng.choice(env.N, env.K, replace=False))
        mask = np.isin(np.arange(env.N), idx)
        prices = rng.uniform(0, 1, env.N) * env.v
        c = env.sample_choice(mask, prices, rng)
        Zs.append(np.hstack([env.X[idx], -prices[idx, None] * env.W[idx]]))
        cs.append(-1 if c < 0 else int(np.flatnonzero(idx == c)[0]))
    return np.array(Zs), np.array(cs)


def test_estimators_are_consistent_on_long_uncensored_runs():
    env = cp.make_environment(N=10, d=2, K=4, rng=np.random.default_rng(5))
    Z, c = _uncensored_data(env, 6000, np.random.default_rng(6))
    truth = np.concatenate([env.theta_v, env.theta_alpha])
    batch = cp.fit_mnl_mle(Z, c, lam=1.0)
    est = cp.OnlineMNLEstimator(d=2, K=4)
    for z, ch in zip(Z, c):
        est.update(z, int(ch))
    assert np.linalg.norm(batch[:2] - truth[:2]) < 0.15
    assert np.linalg.norm(est.theta[:2] - truth[:2]) < 0.2
    assert np.linalg.norm(est.theta - batch) < 0.5
    # V^v is the valuation block of V
    np.testing.assert_allclose(est.Vv, est.V[:2, :2])
    assert est.n_updates == 6000


def test_thompson_sample_count():
    assert cp.thompson_sample_count(10) == 35
    assert cp.thompson_sample_count(20) > cp.thompson_sample_count(10)


@pytest.mark.parametrize("make", [
    lambda: cp.UCBLCBPolicy(beta=1.0), lambda: cp.TSLCBPolicy(beta=1.0),
    lambda: cp.UCBLCBPolicy(beta=1.0, assortment="topk"), lambda: cp.ExploreThenCommit(),
    lambda: cp.CensoringUnawarePricing(), lambda: cp.UCBLCBPolicy(beta=1.0, pricing="ucb"),
    lambda: cp.ExploreThenCommitLCB(),
])
def test_policies_run_and_respect_capacity(env, make):
    out = cp.simulate(env, make(), 60, np.random.default_rng(0))
    assert out["regret"].shape == (60,) and np.all(out["regret"] >= -1e-12)
    assert np.all(out["regret"] <= out["revenue_star"] + 1e-12)


def test_lcb_prices_rarely_censored_and_unaware_pricing_always(env):
    ucb = cp.simulate(env, cp.UCBLCBPolicy(beta=1.0), 300, np.random.default_rng(0))
    unaware = cp.simulate(env, cp.CensoringUnawarePricing(), 50, np.random.default_rng(0))
    assert ucb["censored"].mean() < 0.05
    assert np.all(unaware["censored"] == 1.0)
    np.testing.assert_allclose(unaware["regret"], unaware["revenue_star"])


def test_simulation_is_reproducible(env):
    a = cp.simulate(env, cp.TSLCBPolicy(), 40, np.random.default_rng(9))["regret"]
    b = cp.simulate(env, cp.TSLCBPolicy(), 40, np.random.default_rng(9))["regret"]
    np.testing.assert_array_equal(a, b)


def test_make_policy_names():
    for name in cp.POLICY_NAMES:
        assert isinstance(cp.make_policy(name), cp.Policy)
    assert cp.make_policy("UCB-price heuristic").pricing == "ucb"
    with pytest.raises(ValueError, match="name"):
        cp.make_policy("greedy")


def test_regret_curves_and_growth_statistics():
    out = cp.regret_curves(lambda: cp.UCBLCBPolicy(), N=5, d=2, K=2, T=50, seeds=[0, 1])
    by_name = cp.regret_curves("UCBA-LCBP", N=5, d=2, K=2, T=50, seeds=[0, 1], beta=1.0)   # batched engine
    np.testing.assert_allclose(out["cumulative"], by_name["cumulative"], rtol=0, atol=1e-9)
    assert out["cumulative"].shape == (2, 50)
    assert np.all(np.diff(out["cumulative"], axis=1) >= -1e-12)
    t = np.arange(1, 1001, dtype=float)
    assert abs(cp.growth_ratio(t)[0] - 1.0) < 0.01
    assert abs(cp.growth_ratio(np.sqrt(t))[0] - (math.sqrt(2) - 1)) < 0.01
    assert abs(cp.loglog_slope(np.sqrt(t)) - 0.5) < 1e-9
    assert abs(cp.loglog_slope(3 * t) - 1.0) < 1e-9


def test_mnl_pricing_formula_without_censoring():
    a, b = np.array([0.5, 0.2, 0.8]), np.array([0.5, 0.9, 0.3])
    mask, prices, B = policies._mnl_pricing(a, b, 3)
    np.testing.assert_allclose(prices, 1 / b + B)
    # prices are stationary points of the uncensored revenue: compare with a tiny perturbation
    R = lambda p: float(np.sum(p * np.exp(a - b * p)) / (1 + np.sum(np.exp(a - b * p))))
    assert math.isclose(R(prices), B, rel_tol=1e-6)
    for i in range(3):
        for h in (-1e-3, 1e-3):
            p = prices.copy()
            p[i] += h
            assert R(p) <= R(prices) + 1e-12


def test_bad_inputs_raise_clear_errors(env):
    with pytest.raises(ValueError, match="prices"):
        cp.censored_choice_probabilities(env.v, env.alpha, env.v[:3], np.ones(6, bool))
    with pytest.raises(TypeError, match="offered"):
        cp.censored_choice_probabilities(env.v, env.alpha, env.v, np.ones(6))
    with pytest.raises(ValueError, match="finite"):
        cp.censored_choice_probabilities(np.full(6, np.nan), env.alpha, env.v, np.ones(6, bool))
    with pytest.raises(ValueError, match="K"):
        cp.all_assortments(3, 4)
    with pytest.raises(TypeError, match="N"):
        cp.make_environment(2.5, 2, 1, np.random.default_rng(0))
    with pytest.raises(TypeError, match="rng"):
        cp.make_environment(3, 2, 1, 0)
    with pytest.raises(ValueError, match="beta"):
        cp.UCBLCBPolicy(beta=-1.0)
    with pytest.raises(ValueError, match="C"):
        cp.TSLCBPolicy(C=0.5)
    with pytest.raises(ValueError, match="assortment"):
        cp.UCBLCBPolicy(assortment="greedy")
    with pytest.raises(ValueError, match="pricing"):
        cp.UCBLCBPolicy(pricing="mid")
    with pytest.raises(ValueError, match="choice"):
        cp.OnlineMNLEstimator(2, 2).update(np.zeros((2, 4)), 5)
    with pytest.raises(ValueError, match="Z"):
        cp.OnlineMNLEstimator(2, 2).update(np.zeros((2, 3)), 0)
    with pytest.raises(ValueError, match="choices"):
        cp.fit_mnl_mle(np.zeros((3, 2, 4)), np.array([0, 1, 2]))
    with pytest.raises(TypeError, match="policy"):
        cp.simulate(env, "UCB", 10, np.random.default_rng(0))
    with pytest.raises(ValueError, match="w"):
        cp.best_assortment(env.v, -np.ones(6), cp.all_assortments(6, 2))
    with pytest.raises(ValueError, match="start"):
        cp.loglog_slope(np.arange(1, 10.0), start=1.5)
    with pytest.raises(ValueError, match="seeds"):
        cp.regret_curves(cp.UCBLCBPolicy, 4, 2, 2, 10, [])
    with pytest.raises(TypeError, match="policy"):
        cp.regret_curves(3, 4, 2, 2, 10, [0])


def test_censoring_unaware_regret_is_linear_by_construction():
    """The baseline's prices exceed every valuation (alpha, v <= 1), so it never sells: regret R* per round."""
    for seed in range(3):
        env = cp.make_environment(6, 3, 3, np.random.default_rng(seed))
        out = cp.simulate(env, cp.CensoringUnawarePricing(), 40, np.random.default_rng(seed + 1))
        assert np.all(out["censored"] == 1.0)
        np.testing.assert_allclose(out["regret"], out["revenue_star"])


def test_curve_statistics_and_market_slopes():
    t = np.arange(1, 401, dtype=float)
    st = cp.curve_statistics(np.vstack([np.sqrt(t), 3 * np.sqrt(t)]))
    np.testing.assert_allclose(st["reg_T"], [20.0, 60.0])
    assert st["mean_T"] == pytest.approx(40.0)
    assert st["ratio"] == pytest.approx(math.sqrt(2) - 1, abs=0.01)
    assert st["slope"] == pytest.approx(0.5, abs=1e-9)
    np.testing.assert_allclose(cp.market_slopes(np.vstack([np.sqrt(t), 2 * t, t ** 0.8])), [0.5, 1.0, 0.8],
                               atol=1e-9)
    np.testing.assert_allclose(st["slopes"], [0.5, 0.5], atol=1e-9)
    with pytest.raises(ValueError, match="positive"):
        cp.market_slopes(np.zeros((2, 10)))


def test_seconds_per_round_and_topk_policies():
    sec = cp.seconds_per_round("UCBA-LCBP", 6, 2, 3, rounds=20)
    assert 0.0 <= sec < 1.0
    assert 0.0 <= cp.seconds_per_round("UCBA-LCBP", 6, 2, 3, rounds=20, markets=3) < 1.0
    assert 0.0 <= cp.seconds_per_round("censoring-unaware", 6, 2, 3, rounds=20, markets=2) < 1.0
    with pytest.raises(TypeError, match="markets"):
        cp.seconds_per_round("UCBA-LCBP", 6, 2, 3, rounds=20, markets=1.5)
    assert cp.make_policy("UCBA-LCBP", assortment="topk").assortment == "topk"
    assert cp.make_policy("ETC", assortment="topk").assortment == "topk"
    with pytest.raises(ValueError, match="rounds"):
        cp.seconds_per_round("UCBA-LCBP", 6, 2, 3, rounds=5)
    with pytest.raises(ValueError, match="assortment"):
        cp.make_policy("TSA-LCBP", assortment="greedy")


@pytest.mark.parametrize("name", cp.BATCHED_POLICIES)
@pytest.mark.parametrize("assortment", ["exact", "topk"])
def test_batched_engine_reproduces_one_market_runs(name, assortment):
    """All markets at once: the same trajectories as one market after the other (same draws, same choices)."""
    from companion_lib.cmnl_pricing.batch import batched_regret_curves

    seeds, T = [0, 3, 5], 120
    single = {"cumulative": [], "censored": [], "revenue_star": []}
    for s in seeds:
        env = cp.make_environment(7, 3, 3, np.random.default_rng(s))
        out = cp.simulate(env, cp.make_policy(name, 1.0, assortment), T, np.random.default_rng(s + 1000))
        single["cumulative"].append(np.cumsum(out["regret"]))
        single["censored"].append(out["censored"])
        single["revenue_star"].append(out["revenue_star"])
    batch = batched_regret_curves(name, 7, 3, 3, T, seeds, 1.0, assortment)
    np.testing.assert_allclose(batch["cumulative"], np.array(single["cumulative"]), rtol=0, atol=1e-9)
    np.testing.assert_array_equal(batch["censored"], np.array(single["censored"]))
    np.testing.assert_array_equal(batch["revenue_star"], np.array(single["revenue_star"]))
    # regret_curves takes the batched path for these names, and the one-market path on request
    np.testing.assert_allclose(cp.regret_curves(name, 7, 3, 3, 30, seeds)["cumulative"],
                               cp.regret_curves(name, 7, 3, 3, 30, seeds, batched=False)["cumulative"], atol=1e-9)


def test_batched_engine_rejects_bad_input():
    from companion_lib.cmnl_pricing.batch import batched_regret_curves

    with pytest.raises(ValueError, match="name"):
        batched_regret_curves("censoring-unaware", 5, 2, 2, 10, [0])
    with pytest.raises(ValueError, match="seeds"):
        batched_regret_curves("UCBA-LCBP", 5, 2, 2, 10, [])
    with pytest.raises(TypeError, match="T"):
        batched_regret_curves("UCBA-LCBP", 5, 2, 2, 1.5, [0])
    with pytest.raises(ValueError, match="assortment"):
        batched_regret_curves("UCBA-LCBP", 5, 2, 2, 10, [0], assortment="greedy")


def test_assortment_ties_go_to_the_first_best_set():
    from companion_lib.cmnl_pricing.model import _first_best

    masks = cp.all_assortments(4, 2)
    r, w = np.ones(4), np.ones(4)                       # every singleton ties, every pair ties
    best = cp.best_assortment(r, w, masks)
    np.testing.assert_array_equal(best, masks[4])        # the first pair (pairs beat singletons: 2/3 > 1/2)
    value = np.array([[1.0, 3.0, 3.0 - 1e-15, 2.0], [0.0, 1.0 - 1e-14, 1.0, 1.0]])
    np.testing.assert_array_equal(_first_best(value), [1, 1])


def test_explore_then_commit_lcb_is_censoring_aware(env):
    """Price-zero exploration is never censored; the second half prices below the first half's LCB; the
    commitment is eq. (8) with the batch estimate and stays fixed."""
    T = 300
    policy = cp.ExploreThenCommitLCB(beta=1.0)
    out = cp.simulate(env, policy, T, np.random.default_rng(2))
    n0, n_zero = policy.n_explore, policy.n_price_zero
    assert n0 == round(T ** (2 / 3)) and n_zero == n0 // 2
    assert np.all(out["censored"][:n_zero] == 0.0)
    lcb = policy.v_lcb
    assert lcb is not None and np.all(lcb >= 0) and np.all(lcb <= 1.0 + 1e-12)
    offered, prices = policy.plan
    theta, V = policy._fit(np.array(policy.Z), np.array(policy.choices))
    width = np.sqrt(np.einsum("nd,de,ne->n", env.X, np.linalg.inv(V[:3, :3]), env.X))
    np.testing.assert_allclose(prices, np.maximum(env.X @ theta[:3] - width, 0.0))
    assert np.all(np.diff(out["regret"][n0:]) == 0.0)    # committed: the same expected regret every round
    assert offered.sum() <= env.K
    # a wider confidence radius prices lower after the commitment
    wide = cp.ExploreThenCommitLCB(beta=3.0)
    cp.simulate(env, wide, T, np.random.default_rng(2))
    assert np.all(wide.plan[1] <= prices + 1e-12)
    with pytest.raises(ValueError, match="lam"):
        cp.ExploreThenCommitLCB(lam=0.0)
    with pytest.raises(ValueError, match="beta"):
        cp.ExploreThenCommitLCB(beta=-1.0)
