"""Unit tests for companion_lib.censored_boosting (Bian, Yi and He, ICLR 2025)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from companion_lib import censored_boosting as cb


@pytest.fixture(scope="module")
def data():
    return cb.simulate_interval_censored(300, np.random.default_rng(0))


# -- data ---------------------------------------------------------------------------------------
def test_mean_function_values():
    np.testing.assert_allclose(cb.mean_function([0.0, 0.5, 1.0]), [0.5, 0.1 + 0.8, 0.5 + 0.8], atol=1e-12)


def test_simulated_intervals_contain_y(data):
    y = np.exp(data.log_y)
    assert ((data.left < y) & (y <= data.right)).all()
    assert len(data) == 300
    summary = data.censoring_summary()
    assert 0.05 < summary["left-censored"] < 0.4 and 0.03 < summary["right-censored"] < 0.35
    tr, te = data.split(0.2, np.random.default_rng(1))
    assert len(tr) == 240 and len(te) == 60


def test_current_status_design_has_one_visit():
    d = cb.simulate_interval_censored(200, np.random.default_rng(2), n_monitor=1, error="loglogistic")
    assert ((d.left == 0) | np.isinf(d.right)).all()


def test_simulate_rejects_bad_input():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="n"):
        cb.simulate_interval_censored(0, rng)
    with pytest.raises(ValueError, match="error"):
        cb.simulate_interval_censored(10, rng, error="weibull")
    with pytest.raises(TypeError, match="rng"):
        cb.simulate_interval_censored(10, 0)
    with pytest.raises(ValueError, match="sigma"):
        cb.simulate_interval_censored(10, rng, sigma=-1.0)


# -- closed-form CUT responses ------------------------------------------------------------------
def test_truncated_normal_moments_match_scipy():
    rng = np.random.default_rng(3)
    L = np.array([0.0, 0.5, 1.0, 2.0, 0.1, 3.0])
    R = np.array([1.0, 2.0, np.inf, 2.5, 0.2, np.inf])
    mu = rng.normal(0.5, 0.3, len(L))
    s = 0.4
    y1, y2 = cb.truncated_log_moments(L, R, mu, s)
    with np.errstate(divide="ignore"):
        a, b = (np.log(L) - mu) / s, (np.log(R) - mu) / s
    m, v = stats.truncnorm.stats(a, b, loc=mu, scale=s, moments="mv")
    np.testing.assert_allclose(y1, m, atol=1e-8)
    np.testing.assert_allclose(y2, v + m**2, atol=1e-7)


def test_untruncated_moments_are_the_law_moments():
    L, R = np.zeros(3), np.full(3, np.inf)
    mu = np.array([0.0, 1.0, -0.5])
    for error, var in [("lognormal", 0.3**2), ("loglogistic", (0.3 * np.pi) ** 2 / 3)]:
        y1, y2 = cb.truncated_log_moments(L, R, mu, 0.3, error)
        np.testing.assert_allclose(y1, mu, atol=2e-3)
        np.testing.assert_allclose(y2 - y1**2, var, rtol=2e-2)


def test_logistic_moments_by_monte_carlo():
    rng = np.random.default_rng(4)
    z = rng.logistic(0.2, 0.25, 400_000)
    a, b = np.exp(0.0), np.exp(0.5)
    sel = z[(z > 0.0) & (z <= 0.5)]
    y1, y2 = cb.truncated_log_moments([a], [b], 0.2, 0.25, "loglogistic")
    assert abs(y1[0] - sel.mean()) < 3e-3 and abs(y2[0] - (sel**2).mean()) < 3e-3


def test_cut_unbiasedness_monte_carlo():
    """Prop. 1: E L_CUT(O, f(X)) = E 1/2 (log Y - f(X))^2."""
    d = cb.simulate_interval_censored(100_000, np.random.default_rng(5))
    y1, y2 = cb.truncated_log_moments(d.left, d.right, d.mu, d.sigma)
    for f in [np.zeros(len(d)), d.mu, 0.5 + 0.3 * d.x]:
        assert abs(cb.cut_loss(y1, y2, f) - cb.l2_loss(d.log_y, f)) < 3e-3


def test_oracle_survival_status_rules():
    L = np.array([2.0, 0.0, 1.0, 1.0])
    R = np.array([np.inf, 1.0, 3.0, 3.0])
    out = cb.oracle_survival_status(L, R, mu=np.zeros(4), sigma=0.5, s=1.5)
    assert out[0] == 1.0 and out[1] == -1.0
    assert -1 < out[2] < 1 and out[2] == out[3]
    # direct: P(Y > 1.5 | 1 < Y <= 3) for log Y ~ N(0, .25)
    F = stats.norm(0, 0.5).cdf
    p = (F(np.log(3)) - F(np.log(1.5))) / (F(np.log(3)) - F(0.0))
    assert abs(out[2] - (2 * p - 1)) < 1e-12


# -- Turnbull ------------------------------------------------------------------------------------
def test_self_consistency_exact_data_is_empirical():
    A = np.eye(4)[[0, 1, 1, 3, 3, 3]]
    p = cb.self_consistency_em(A)[0]
    np.testing.assert_allclose(p, [1 / 6, 2 / 6, 0, 3 / 6], atol=1e-8)


def test_self_consistency_rejects_bad_input():
    with pytest.raises(ValueError, match="support point"):
        cb.self_consistency_em(np.array([[1, 0], [0, 0]]))
    with pytest.raises(ValueError, match="weights"):
        cb.self_consistency_em(np.eye(2), weights=np.ones((1, 3)))


def test_turnbull_textbook_example():
    # intervals (0,1], (0,2], (1,3], (2,3]: innermost intervals (0,1], (1,2], (2,3]; the likelihood
    # p1 (p1 + p2) (p2 + p3) p3 is maximal at p = (1/2, 0, 1/2)
    q, p, m = cb.turnbull_npmle([0, 0, 1, 2], [1, 2, 3, 3])
    np.testing.assert_allclose(q, [0, 1, 2])
    np.testing.assert_allclose(p, [1, 2, 3])
    np.testing.assert_allclose(m, [0.5, 0.0, 0.5], atol=1e-3)


def test_turnbull_matches_surpyval():
    surpyval = pytest.importorskip("surpyval")
    d = cb.simulate_interval_censored(60, np.random.default_rng(1))
    q, p, m = cb.turnbull_npmle(d.left, d.right)
    assert m.sum() == pytest.approx(1.0)
    ref = surpyval.Turnbull.fit(xl=d.left, xr=d.right, turnbull_estimator="Kaplan-Meier")
    pts = np.unique(np.concatenate([d.left, d.right[np.isfinite(d.right)]]))
    pts = pts[pts > 0]
    ours = np.array([m[q >= t].sum() for t in pts])
    np.testing.assert_allclose(ours, ref.sf(pts), atol=1e-6)


def test_interval_membership():
    A = cb.interval_membership([0, 1], [1, np.inf], [0.5, 1.0, 2.0, np.inf])
    assert A.tolist() == [[True, True, False, False], [False, False, True, True]]
    with pytest.raises(ValueError, match="left < right"):
        cb.interval_membership([1.0], [1.0], [0.5])


def test_kernel_turnbull_law_and_responses(data):
    law = cb.kernel_turnbull(data.x, data.left, data.right)
    assert law.masses.shape == (len(data), len(law.support))
    np.testing.assert_allclose(law.masses.sum(axis=1), 1.0)
    assert np.isinf(law.support[-1])
    S = law.survival([0.5, 2.0, 5.0])
    assert (np.diff(S, axis=1) <= 1e-12).all()
    y1, y2 = cb.cut_responses(law, data.left, data.right)
    assert (y2 >= y1**2 - 1e-9).all()
    # the imputed log-time lies (up to the grid) in the observed interval
    with np.errstate(divide="ignore"):
        lo, hi = np.log(data.left), np.log(np.minimum(data.right, law.tail_value))
    assert np.mean((y1 > lo - 0.3) & (y1 <= hi + 0.3)) > 0.97
    # and is close to the oracle on average
    o1, _ = cb.truncated_log_moments(data.left, data.right, data.mu, data.sigma)
    assert np.mean(np.abs(y1 - o1)) < 0.1
    with pytest.raises(ValueError, match="bandwidth"):
        cb.kernel_turnbull(data.x, data.left, data.right, bandwidth=0)


def test_survival_status_responses(data):
    law = cb.kernel_turnbull(data.x, data.left, data.right)
    s = np.exp(1.0)
    est = cb.survival_status_responses(law, data.left, data.right, s)
    orc = cb.oracle_survival_status(data.left, data.right, data.mu, data.sigma, s)
    assert est.shape == (len(data),) and (np.abs(est) <= 1).all()
    decided = (data.left >= s) | (data.right <= s)
    np.testing.assert_allclose(est[decided], orc[decided])
    assert np.mean(np.abs(est - orc)) < 0.2


# -- parametric first stage ----------------------------------------------------------------------
def test_bspline_basis_partition_of_unity():
    B = cb.bspline_basis(np.linspace(0, 1, 11), 8)
    assert B.shape == (11, 8)
    np.testing.assert_allclose(B.sum(axis=1), 1.0)
    with pytest.raises(ValueError, match="n_basis"):
        cb.bspline_basis([0.5], 3)


def test_lognormal_aft_recovers_truth():
    d = cb.simulate_interval_censored(1500, np.random.default_rng(6))
    aft = cb.LognormalAFT().fit(d.x, d.left, d.right)
    assert abs(aft.sigma_ - 0.25) < 0.05
    assert np.mean((aft.predict_mean(d.x) - d.mu) ** 2) < 0.005
    y1, y2 = aft.log_moments(d.x, d.left, d.right)
    assert y1.shape == (1500,)


def test_naive_midpoint():
    out = cb.naive_midpoint_response([0, 1, 2], [2, 3, np.inf])
    np.testing.assert_allclose(out, np.log([1.0, 2.0, 2.0]))


# -- losses and boosting -------------------------------------------------------------------------
def test_losses():
    assert cb.l2_loss([1, 2], [1, 0]) == pytest.approx(1.0)
    # with y2 = y1^2 (no censoring) the CUT loss is the L2 loss
    y = np.array([0.3, -1.0, 2.0])
    f = np.array([0.0, 0.5, 1.0])
    assert cb.cut_loss(y, y**2, f) == pytest.approx(cb.l2_loss(y, f))
    with pytest.raises(ValueError, match="shape"):
        cb.cut_loss([1.0], [1.0, 2.0], [0.0])


def test_pspline_smoother_df():
    x = np.sort(np.random.default_rng(7).uniform(0, 1, 200))
    sm = cb.PSplineSmoother(df=10).fit_design(x)
    assert sm.df_ == pytest.approx(10, abs=1e-3)
    assert np.trace(sm.matrix()) == pytest.approx(10, abs=1e-3)
    # a spline reproduces linear functions (second-difference penalty ignores them)
    np.testing.assert_allclose(sm.B_ @ sm.coef(2 * x + 1), 2 * x + 1, atol=1e-6)
    with pytest.raises(ValueError, match="df"):
        cb.PSplineSmoother(df=100, n_basis=40)


def test_boosting_loop_matches_closed_form(data):
    y = data.log_y
    model = cb.L2BoostRegressor(n_estimators=250, tol=None, solver="loop").fit(data.x, y)
    path = cb.l2boost_pspline_path(model.smoother_, y, [0, 250])
    np.testing.assert_allclose(path[0], 0.0, atol=1e-12)
    np.testing.assert_allclose(path[1], model.fitted_train_, atol=1e-9)
    np.testing.assert_allclose(model.predict(data.x), model.fitted_train_, atol=1e-9)
    assert np.all(np.diff(model.loss_path_) <= 1e-12)


def test_cut_and_imp_give_the_same_fit(data):
    y1, y2 = cb.truncated_log_moments(data.left, data.right, data.mu, data.sigma)
    cut = cb.L2BoostRegressor(loss="cut").fit(data.x, y1, y2)
    imp = cb.L2BoostRegressor(loss="imp").fit(data.x, y1)
    assert cut.n_estimators_ == imp.n_estimators_ > 10
    np.testing.assert_allclose(cut.predict(data.x), imp.predict(data.x), atol=1e-12)


def test_boosting_with_trees_and_2d_input(data):
    X = np.c_[data.x, np.random.default_rng(8).normal(size=len(data))]
    model = cb.L2BoostRegressor(base_learner="tree", learning_rate=0.1, n_estimators=50, tol=None).fit(X, data.log_y)
    assert model.n_estimators_ == 50 and len(model.trees_) == 50
    assert np.mean((model.predict(X) - data.mu) ** 2) < np.var(data.mu)
    with pytest.raises(ValueError, match="single feature"):
        cb.L2BoostRegressor().fit(X, data.log_y)


def test_boosting_rejects_bad_input(data):
    with pytest.raises(ValueError, match="learning_rate"):
        cb.L2BoostRegressor(learning_rate=0).fit(data.x, data.log_y)
    with pytest.raises(ValueError, match="loss"):
        cb.L2BoostRegressor(loss="huber").fit(data.x, data.log_y)
    with pytest.raises(ValueError, match="same length"):
        cb.L2BoostRegressor().fit(data.x, data.log_y[:-1])
    with pytest.raises(ValueError, match="NaN"):
        cb.L2BoostRegressor().fit(data.x, np.full(len(data), np.nan))
    with pytest.raises(ValueError, match="not fitted"):
        cb.L2BoostRegressor().predict(data.x)


def test_classifier_outputs(data):
    s = np.exp(1.0)
    y1 = cb.oracle_survival_status(data.left, data.right, data.mu, data.sigma, s)
    clf = cb.L2BoostClassifier().fit(data.x, y1)
    d = clf.decision_function(data.x)
    assert (np.abs(d) <= 1).all()
    pred = clf.predict(data.x)
    assert set(np.unique(pred)) <= {-1, 1}
    sens, spec = cb.sensitivity_specificity(np.where(data.log_y > 1.0, 1, -1), pred)
    assert 0 <= sens <= 1 and spec > 0.5


# -- metrics and baseline ------------------------------------------------------------------------
def test_regression_metrics():
    m = cb.regression_metrics([1.0, 2.0, 3.0], [1.0, 2.5, 3.5])
    assert m["SMSqE"] == pytest.approx(0.5 / 3)
    assert m["SMaxAE"] == pytest.approx(0.5)
    assert m["SKDT"] == pytest.approx(1.0)


def test_sensitivity_specificity():
    sens, spec = cb.sensitivity_specificity([1, 1, -1, -1], [1, -1, -1, -1])
    assert (sens, spec) == (0.5, 1.0)
    with pytest.raises(ValueError, match="both classes"):
        cb.sensitivity_specificity([1, 1], [1, -1])


def test_xgboost_aft_baseline(data):
    pytest.importorskip("xgboost")
    tr, te = data.split(0.2, np.random.default_rng(9))
    pred = cb.xgboost_aft_predict(tr.x, tr.left, tr.right, te.x, n_rounds=100)
    assert pred.shape == (len(te),)
    assert np.mean((pred - te.mu) ** 2) < np.mean((te.mu.mean() - te.mu) ** 2) + 0.05


def test_closed_form_solver_matches_loop(data):
    y1, y2 = cb.truncated_log_moments(data.left, data.right, data.mu, data.sigma)
    fast = cb.L2BoostRegressor(solver="closed_form").fit(data.x, y1, y2)
    slow = cb.L2BoostRegressor(solver="loop").fit(data.x, y1, y2)
    assert fast.n_estimators_ == slow.n_estimators_
    np.testing.assert_allclose(fast.loss_path_, slow.loss_path_, atol=1e-10)
    np.testing.assert_allclose(fast.predict(data.x), slow.predict(data.x), atol=1e-9)
    capped = cb.L2BoostRegressor(n_estimators=5000, tol=None).fit(data.x, y1, y2)
    assert capped.n_estimators_ == 5000
    with pytest.raises(ValueError, match="solver"):
        cb.L2BoostRegressor(solver="magic").fit(data.x, y1)


def test_run_simulation_records():
    pytest.importorskip("xgboost")
    df = cb.run_simulation("loglogistic", [0], 1, n=200, xgb_rounds=20)
    reg = df[df.task == "regression"]
    assert set(reg.method) == set(cb.REGRESSION_METHODS)
    assert (reg.SMSqE >= 0).all()
    cut = reg.set_index("method")
    assert cut.loc["CUT-np", "SMSqE"] == cut.loc["IMP-np", "SMSqE"]
    cls = df[df.task == "classification"]
    assert set(cls.method) == set(cb.CLASSIFICATION_METHODS)
    with pytest.raises(ValueError, match="reps_per_seed"):
        cb.run_simulation("lognormal", [0], 0)


def test_shared_smoother_gives_the_fits_of_a_fresh_one(data):
    y1, y2 = cb.truncated_log_moments(data.left, data.right, data.mu, data.sigma)
    a = cb.L2BoostRegressor().fit(data.x, y1, y2)
    b = cb.L2BoostRegressor(loss="imp").fit(data.x, y1)
    assert a.smoother_ is b.smoother_                      # one smoother per design, shared
    fresh = cb.PSplineSmoother().fit_design(data.x)
    np.testing.assert_array_equal(a.smoother_.H_, fresh.H_)
    np.testing.assert_array_equal(a.smoother_.eig_[0], fresh.eig_[0])
    other = cb.L2BoostRegressor(df=10).fit(data.x, y1)     # another df is another smoother
    assert other.smoother_ is not a.smoother_ and abs(other.smoother_.df_ - 10) < 1e-6
    with pytest.raises(ValueError, match="df"):
        cb.L2BoostRegressor(df=100).fit(data.x, y1)


def _fake_results():
    """Two replications of one setting with hand-set metrics (run_simulation's record layout)."""
    import pandas as pd

    rows = []
    for rep, (n_err, cut_err) in enumerate([(0.04, 0.01), (0.02, 0.01)]):
        smsqe = {"R": 0.01, "O": 0.005, "CUT-param": 0.02, "CUT-np": cut_err, "IMP-np": cut_err, "N": n_err,
                 "XGB-AFT": 0.03}
        for m in cb.REGRESSION_METHODS:
            rows.append({"setting": "lognormal", "seed": 7, "rep": rep, "task": "regression", "method": m,
                         "SMSqE": smsqe[m], "SMaxAE": 2 * smsqe[m], "SKDT": 1 - smsqe[m]})
        sens = {"R": 0.4, "O": 0.4, "CUT-np": 0.5, "N": 0.1, "Bayes": 0.4}
        for m in cb.CLASSIFICATION_METHODS:
            rows.append({"setting": "lognormal", "seed": 7, "rep": rep, "task": "classification", "method": m,
                         "sensitivity": sens[m], "specificity": 0.9, "accuracy": 0.8})
    return pd.DataFrame(rows)


def test_paired_statistics_by_hand():
    stats_ = cb.paired_statistics(_fake_results(), "lognormal")
    assert set(stats_) == set(cb.PAIRED_STATISTICS)
    a, b = stats_["n_ratio"]
    np.testing.assert_allclose(a - b, [2.0, 1.0])          # N/CUT = 4 and 2: log2 = 2 and 1
    a, b = stats_["vs_r"]
    np.testing.assert_allclose(a - b, [0.0, 0.0])
    a, b = stats_["param"]
    np.testing.assert_allclose(a - b, [1.0, 0.0])
    a, b = stats_["maxae"]
    np.testing.assert_allclose(a - b, [0.06, 0.02])
    a, b = stats_["skdt"]
    np.testing.assert_allclose(a - b, [0.03, 0.01])
    a, b = stats_["sens"]
    np.testing.assert_allclose(a - b, [0.4, 0.4])
    # BA: Bayes 0.65, CUT 0.70, N 0.50, constant 0.5 -> min(0.15, 0.15) - 0.05 = 0.10
    a, b = stats_["bayes"]
    np.testing.assert_allclose(a - b, [0.10, 0.10])


def test_paired_statistics_rejects_bad_input():
    with pytest.raises(TypeError, match="DataFrame"):
        cb.paired_statistics([1, 2], "lognormal")
    with pytest.raises(ValueError, match="setting"):
        cb.paired_statistics(_fake_results(), "weibull")
    with pytest.raises(ValueError, match="columns"):
        cb.paired_statistics(_fake_results().drop(columns="rep"), "lognormal")
