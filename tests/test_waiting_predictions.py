"""Tests of companion_lib.waiting_predictions (Shirali, Procaccia and Abebe, ICLR 2025)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from companion_lib import waiting_predictions as at

H_WEAK = at.linear_signal(0.2, 0.3)
H_ID = at.linear_signal(0.0, 1.0)


@pytest.fixture(scope="module")
def unequal():
    return at.beta_population(0.2, 0.5, n_grid=300)


# -- population and signal ---------------------------------------------------------------------------
@pytest.mark.parametrize("mean,kappa", [(0.2, 20.0), (0.2, 0.5), (0.05, 1.0)])
def test_beta_population_moments(mean, kappa):
    pop = at.beta_population(mean, kappa, n_grid=400)
    assert pop.w.sum() == pytest.approx(1.0)
    assert pop.mean == pytest.approx(mean, abs=1e-9)  # node = conditional bin mean: exact first moment
    assert pop.sd == pytest.approx(np.sqrt(mean * (1 - mean) / (kappa + 1)))
    assert np.all(np.diff(pop.p) > 0)
    # second moment from the grid is close to the exact one
    assert np.sqrt(pop.w @ (pop.p - pop.mean) ** 2) == pytest.approx(pop.sd, rel=2e-2)


def test_two_group_population_and_sampling():
    pop = at.two_group_population(0.2, 0.05, 0.5)
    assert pop.mean == pytest.approx(0.8 * 0.05 + 0.2 * 0.5)
    draws = pop.sample(20000, np.random.default_rng(0))
    assert set(np.unique(draws)) == {0.05, 0.5}
    assert np.mean(draws == 0.5) == pytest.approx(0.2, abs=0.02)


def test_beta_sampling_is_exact():
    pop = at.beta_population(0.2, 2.0)
    draws = pop.sample(20000, np.random.default_rng(1))
    assert stats.kstest(draws, "beta", args=pop.beta_params).pvalue > 0.01


def test_linear_signal_clips_and_increases():
    h = at.linear_signal(0.0, 4.0)
    assert np.allclose(h(np.array([0.0, 0.1, 0.5])), [0.0, 0.4, 1.0])


@pytest.mark.parametrize("call,exc", [
    (lambda: at.beta_population(0.0, 1.0), ValueError),
    (lambda: at.beta_population(1.0, 1.0), ValueError),
    (lambda: at.beta_population(0.2, -1.0), ValueError),
    (lambda: at.beta_population(0.2, 1.0, n_grid=1), ValueError),
    (lambda: at.beta_population(0.2, 1.0, n_grid=2.5), TypeError),
    (lambda: at.beta_population("0.2", 1.0), TypeError),
    (lambda: at.two_group_population(0.2, 0.5, 0.1), ValueError),
    (lambda: at.linear_signal(0.1, 0.0), ValueError),
    (lambda: at.Population(np.array([0.2, 0.1]), np.array([0.5, 0.5]), True), ValueError),
    (lambda: at.Population(np.array([0.1, 0.2]), np.array([0.5, 0.6]), True), ValueError),
    (lambda: at.Population(np.array([0.1, np.nan]), np.array([0.5, 0.5]), True), ValueError),
])
def test_bad_inputs_raise(call, exc):
    with pytest.raises(exc):
        call()


def test_signal_must_be_monotone_probability(unequal):
    with pytest.raises(ValueError, match="non-decreasing"):
        at.ranking_risk(unequal, lambda p: 1 - p, 2)
    with pytest.raises(ValueError, match="probabilities"):
        at.ranking_risk(unequal, lambda p: 2 * p, 2)
    with pytest.raises(TypeError, match="callable"):
        at.ranking_risk(unequal, 0.5, 2)


# -- ranking among the active ------------------------------------------------------------------------
def test_active_weights_and_pmf_sum_to_one(unequal):
    w, share = at.active_weights(unequal, 4)
    assert w.sum() == pytest.approx(1.0)
    assert share == pytest.approx(unequal.w @ (1 - unequal.p) ** 4)
    B = at.observation_pmf(unequal, H_WEAK, 5)
    assert B.shape == (unequal.p.size, 6)
    assert np.allclose(B.sum(axis=1), 1.0)


def test_active_population_gets_safer(unequal):
    means = [at.active_weights(unequal, t)[0] @ unequal.p for t in range(6)]
    assert np.all(np.diff(means) < 0)


def test_ranking_risk_at_zero_is_half_and_bounded(unequal):
    assert at.ranking_risk(unequal, H_WEAK, 0) == pytest.approx(0.5)
    R = at.ranking_risk_curve(unequal, H_ID, 6)
    assert np.all((R > 0) & (R <= 0.5))


def test_ranking_risk_two_point_closed_form():
    # two groups, one observation: the riskier one is mis-ordered iff it shows 0 and the other 1
    pop = at.two_group_population(0.3, 0.1, 0.6)
    h = H_ID
    R1 = at.ranking_risk(pop, h, 1)
    a, b = 0.6, 0.1  # h(p_i), h(p_j) with p_i > p_j
    expected = (1 - a) * b + 0.5 * (a * b + (1 - a) * (1 - b))
    assert R1 == pytest.approx(expected)


def test_information_only_ranking_improves(unequal):
    # freezing the population at f_0 leaves only the information effect: R falls with t
    R = [at.ranking_risk(unequal, H_WEAK, t, population_epoch=0) for t in range(1, 9)]
    assert np.all(np.diff(R) < 0)


def test_ranking_risk_matches_monte_carlo():
    pop = at.beta_population(0.2, 0.5, n_grid=400)
    rng = np.random.default_rng(0)
    p, y, act = at.simulate_panel(pop, H_WEAK, 6, 100_000, rng)
    for t in (1, 6):
        exact = at.ranking_risk(pop, H_WEAK, t)
        mc = at.mc_ranking_risk(p, y[:, t], act[:, t])
        assert mc == pytest.approx(exact, abs=3e-3)


def test_mc_ranking_risk_equals_brute_force_over_pairs():
    rng = np.random.default_rng(0)
    p = rng.choice([0.1, 0.2, 0.5], 60)  # ties in p are left out, as in the definition
    y = rng.integers(0, 4, 60)
    a = rng.random(60) < 0.8
    losses = [(y[i] < y[j]) + 0.5 * (y[i] == y[j])
              for i in range(60) for j in range(60) if a[i] and a[j] and p[i] > p[j]]
    assert at.mc_ranking_risk(p, y, a) == pytest.approx(np.mean(losses))


def test_mc_ranking_risk_validates():
    with pytest.raises(ValueError):
        at.mc_ranking_risk(np.ones(3), np.ones(4), np.ones(3, bool))
    with pytest.raises(ValueError):
        at.mc_ranking_risk(np.ones(3), np.ones(3), np.zeros(3, bool))
    with pytest.raises(ValueError, match="distinct"):
        at.mc_ranking_risk(np.ones(3), np.ones(3), np.ones(3, bool))


# -- individual accuracy -----------------------------------------------------------------------------
def test_posterior_mean_is_monotone_and_calibrated(unequal):
    t = 5
    m = at.posterior_mean(unequal, H_WEAK, t)
    assert np.all(np.diff(m) > 0)  # MLR: more observations, higher predicted risk
    w, _ = at.active_weights(unequal, t)
    B = at.observation_pmf(unequal, H_WEAK, t)
    assert (w @ B) @ m == pytest.approx(w @ unequal.p)  # tower property


def test_posterior_mse_decreases_and_matches_mc(unequal):
    mse = [at.posterior_mse(unequal, H_WEAK, t) for t in range(0, 8)]
    assert np.all(np.diff(mse[1:]) < 0)
    pop = at.beta_population(0.2, 0.5, n_grid=400)
    p, y, act = at.simulate_panel(pop, H_WEAK, 4, 100_000, np.random.default_rng(3))
    assert at.mc_posterior_mse(pop, H_WEAK, p, y, act, 4) == pytest.approx(
        at.posterior_mse(pop, H_WEAK, 4), rel=0.05)


# -- welfare -----------------------------------------------------------------------------------------
def test_welfare_order_oracle_prediction_random(unequal):
    T, beta = 6, 0.1
    U = at.one_time_welfare(unequal, H_ID, T, beta)
    Ur = at.one_time_welfare(unequal, H_ID, T, beta, rule="random")
    Uo = at.one_time_welfare(unequal, H_ID, T, beta, rule="oracle")
    assert np.all(Uo >= U - 1e-12) and np.all(U >= Ur - 1e-12)
    assert U[0] == pytest.approx(Ur[0])  # no observation at t=0: prediction is random
    # random allocation at t=0 has the closed form E[1 - (1-p)^T]
    assert Ur[0] == pytest.approx(unequal.w @ (1 - (1 - unequal.p) ** T))


def test_one_time_welfare_matches_monte_carlo():
    pop = at.beta_population(0.2, 2.0, n_grid=400)
    T, beta = 5, 0.1
    rng = np.random.default_rng(2)
    p, y, act = at.simulate_panel(pop, H_ID, T, 200_000, rng)
    U_mc, R_mc = at.mc_one_time_welfare(p, y, act, T, beta, rng)
    U = at.one_time_welfare(pop, H_ID, T, beta)
    Ur = at.one_time_welfare(pop, H_ID, T, beta, rule="random")
    assert np.allclose(U_mc, U, atol=6e-3)
    assert np.allclose(R_mc, Ur, atol=6e-3)


def test_budget_compositions():
    C = at.budget_compositions(4, 5)
    assert C.shape == (56, 4)  # C(8, 3)
    assert np.all(C.sum(axis=1) == 5) and np.all(C >= 0)
    assert len({tuple(r) for r in C}) == 56
    assert at.budget_compositions(1, 3).tolist() == [[3]]


def test_over_time_beats_one_time(unequal):
    T, beta = 4, 0.1
    f, U, splits, Us = at.optimal_over_time(unequal, H_ID, T, beta, units=4)
    ts, U1 = at.optimal_one_time(unequal, H_ID, T, beta)
    assert U >= U1.max() - 1e-12
    assert f.sum() == pytest.approx(1.0) and Us.shape == (splits.shape[0],)
    assert at.mean_allocation_epoch(np.eye(T)[ts]) == ts


def test_allocation_welfare_validates(unequal):
    with pytest.raises(ValueError, match="shape"):
        at.allocation_welfare(unequal, H_ID, 3, 0.1, np.ones((1, 4)) / 4)
    with pytest.raises(ValueError, match="summing"):
        at.allocation_welfare(unequal, H_ID, 3, 0.1, np.ones((1, 3)))
    with pytest.raises(ValueError, match="rule"):
        at.allocation_welfare(unequal, H_ID, 3, 0.1, np.ones((1, 3)) / 3, rule="best")
    with pytest.raises(ValueError, match="beta"):
        at.one_time_welfare(unequal, H_ID, 3, 0.0)
    with pytest.raises(ValueError):
        at.mean_allocation_epoch(np.array([0.5, 0.2]))
    with pytest.raises(TypeError):
        at.simulate_panel(unequal, H_ID, 3, 10, rng=0)


def test_mc_ranking_risk_agrees_with_scipy_kendall_tau():
    # with distinct risks, R = (1 - tau_a) / 2, and tau_a follows from scipy's tau-b and the y-ties
    rng = np.random.default_rng(5)
    pop = at.beta_population(0.2, 2.0)
    p, y, act = at.simulate_panel(pop, H_WEAK, 5, 3000, rng)
    pa, ya = p[act[:, 5]], y[act[:, 5], 5]
    n0 = pa.size * (pa.size - 1) / 2
    counts = np.bincount(ya)
    n2 = np.sum(counts * (counts - 1) / 2)
    tau_b = stats.kendalltau(pa, ya, variant="b").statistic
    tau_a = tau_b * np.sqrt(n0 * (n0 - n2)) / n0
    assert at.mc_ranking_risk(p, y[:, 5], act[:, 5]) == pytest.approx((1 - tau_a) / 2, abs=1e-10)


def test_one_time_is_a_special_over_time_split(unequal):
    T, beta = 5, 0.07
    U = at.one_time_welfare(unequal, H_ID, T, beta)
    for t in range(T):
        split = np.zeros(T)
        split[t] = 1.0
        assert at.allocation_welfare(unequal, H_ID, T, beta, split)[0] == pytest.approx(U[t])


def test_welfare_does_not_depend_on_chunking(unequal):
    splits = at.budget_compositions(3, 4) / 4
    whole = at.allocation_welfare(unequal, H_ID, 3, 0.1, splits)
    parts = np.concatenate([at.allocation_welfare(unequal, H_ID, 3, 0.1, splits[i:i + 4])
                            for i in range(0, len(splits), 4)])
    assert np.allclose(whole, parts)
