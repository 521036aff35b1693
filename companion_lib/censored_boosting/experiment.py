r"""The book's runs: the metrics, the xgboost AFT baseline, and one replication of the paper's simulation
(Figures 1 and 2 in miniature) over every method, repeated over seeds by :func:`run_simulation`."""

from __future__ import annotations

import numpy as np
from scipy import stats

from .data import _as_1d, _intervals, _positive_int, simulate_interval_censored
from .first_stage import LognormalAFT, kernel_turnbull, oracle_survival_status, truncated_log_moments
from .boosting import (L2BoostClassifier, L2BoostRegressor, cut_responses, naive_midpoint_response,
                       survival_status_responses)

__all__ = [
    "regression_metrics", "sensitivity_specificity", "xgboost_aft_predict", "simulate_replication", "run_simulation",
    "paired_statistics", "REGRESSION_METHODS", "CLASSIFICATION_METHODS", "PAIRED_STATISTICS",
]


# ------------------------------------------------------------------------------------------------
# metrics and a baseline
# ------------------------------------------------------------------------------------------------
def regression_metrics(f, mu) -> dict:
    r"""The paper's metrics against the truth :math:`\mu(X)`: SMSqE :math:`=\mathrm{mean}(f-\mu)^2`,
    SMaxAE :math:`=\max|f-\mu|`, SKDT = Kendall's :math:`\tau(f,\mu)`."""
    f, mu = _as_1d(f, "f"), _as_1d(mu, "mu")
    if f.shape != mu.shape:
        raise ValueError("f and mu must have the same shape")
    return {"SMSqE": float(np.mean((f - mu) ** 2)), "SMaxAE": float(np.max(np.abs(f - mu))),
            "SKDT": float(stats.kendalltau(f, mu)[0])}


def sensitivity_specificity(truth, predicted) -> tuple[float, float]:
    """Sensitivity P(pred = +1 | truth = +1) and specificity P(pred = -1 | truth = -1); labels in {-1, +1}
    (or booleans, True = positive)."""
    t = np.asarray(truth)
    p = np.asarray(predicted)
    if t.shape != p.shape or t.ndim != 1:
        raise ValueError("truth and predicted must be 1-D arrays of the same shape")
    t, p = (t > 0) if t.dtype != bool else t, (p > 0) if p.dtype != bool else p
    if t.all() or (~t).all():
        raise ValueError("truth must contain both classes")
    return float(p[t].mean()), float((~p[~t]).mean())


def xgboost_aft_predict(x_train, left, right, x_test, n_rounds: int = 300, max_depth: int = 2,
                        eta: float = 0.05, sigma: float = 0.5, distribution: str = "normal",
                        seed: int = 0) -> np.ndarray:
    r"""Baseline: xgboost's accelerated-failure-time objective (``survival:aft``), which takes interval
    bounds natively; returns the predicted location of :math:`\log Y` (the margin) for ``x_test``."""
    import xgboost as xgb

    L, R = _intervals(left, right)
    Xtr = np.asarray(x_train, dtype=float).reshape(len(L), -1)
    Xte = np.asarray(x_test, dtype=float).reshape(len(np.asarray(x_test)), -1)
    d = xgb.DMatrix(Xtr)
    d.set_float_info("label_lower_bound", L)
    d.set_float_info("label_upper_bound", R)
    params = {"objective": "survival:aft", "eval_metric": "aft-nloglik", "aft_loss_distribution": distribution,
              "aft_loss_distribution_scale": sigma, "tree_method": "hist", "learning_rate": eta,
              "max_depth": max_depth, "nthread": 1, "seed": seed, "verbosity": 0}
    booster = xgb.train(params, d, num_boost_round=_positive_int(n_rounds, "n_rounds"))
    return booster.predict(xgb.DMatrix(Xte), output_margin=True)


# ------------------------------------------------------------------------------------------------
# one replication of the paper's simulation (Figures 1 and 2 in miniature)
# ------------------------------------------------------------------------------------------------
REGRESSION_METHODS = ("R", "O", "CUT-param", "CUT-np", "IMP-np", "N", "XGB-AFT")
CLASSIFICATION_METHODS = ("R", "O", "CUT-np", "N", "Bayes")


def simulate_replication(rng: np.random.Generator, error: str = "lognormal", n: int = 500,
                         s: float = float(np.exp(1.2)), test_fraction: float = 0.2, n_monitor: int = 3,
                         bandwidth: float = 0.08, xgb_rounds: int = 300) -> list[dict]:
    r"""One replication: simulate, split 80/20, fit every method, score on the test set.

    Regression (target :math:`\log Y`): R = L2Boost on the uncensored :math:`\log Y` (reference);
    O = L2Boost-CUT with the true law; CUT-param = L2Boost-CUT with the lognormal AFT first stage;
    CUT-np / IMP-np = L2Boost-CUT / -IMP with the kernel-Turnbull first stage; N = L2Boost on naive
    midpoints; XGB-AFT = xgboost's ``survival:aft``. Classification (target :math:`2I(Y>s)-1`): the same
    first stages, plus the Bayes rule :math:`\mathrm{sign}(\mu(x)-\log s)`. Returns one record per
    (task, method) with the test metrics and the number of boosting steps.
    """
    data = simulate_interval_censored(n, rng, n_monitor=n_monitor, error=error)
    tr, te = data.split(test_fraction, rng)
    law = kernel_turnbull(tr.x, tr.left, tr.right, bandwidth=bandwidth)
    aft = LognormalAFT().fit(tr.x, tr.left, tr.right)
    responses = {
        "R": (tr.log_y, None, "cut"),
        "O": (*truncated_log_moments(tr.left, tr.right, tr.mu, tr.sigma, error), "cut"),
        "CUT-param": (*aft.log_moments(tr.x, tr.left, tr.right), "cut"),
        "CUT-np": (*cut_responses(law, tr.left, tr.right), "cut"),
        "N": (naive_midpoint_response(tr.left, tr.right), None, "cut"),
    }
    responses["IMP-np"] = (responses["CUT-np"][0], None, "imp")
    records = []
    for method in REGRESSION_METHODS:
        if method == "XGB-AFT":
            pred, steps = xgboost_aft_predict(tr.x, tr.left, tr.right, te.x, n_rounds=xgb_rounds), xgb_rounds
        else:
            y1, y2, loss = responses[method]
            model = L2BoostRegressor(loss=loss).fit(tr.x, y1, y2)
            pred, steps = model.predict(te.x), model.n_estimators_
        records.append({"task": "regression", "method": method, "steps": steps,
                        **regression_metrics(pred, te.mu)})
    truth = np.where(te.log_y > np.log(s), 1, -1)
    if truth.min() == truth.max():                             # one class only: skip classification
        return records
    status = {
        "R": np.where(tr.log_y > np.log(s), 1.0, -1.0),
        "O": oracle_survival_status(tr.left, tr.right, tr.mu, tr.sigma, s, error),
        "CUT-np": survival_status_responses(law, tr.left, tr.right, s),
        "N": np.where(naive_midpoint_response(tr.left, tr.right) > np.log(s), 1.0, -1.0),
    }
    for method in CLASSIFICATION_METHODS:
        if method == "Bayes":
            pred = np.where(te.mu > np.log(s), 1, -1)
        else:
            pred = L2BoostClassifier().fit(tr.x, status[method]).predict(te.x)
        sens, spec = sensitivity_specificity(truth, pred)
        records.append({"task": "classification", "method": method, "sensitivity": sens,
                        "specificity": spec, "accuracy": float(np.mean(pred == truth))})
    return records


def run_simulation(error: str, seeds, reps_per_seed: int, **kwargs):
    """Replications of :func:`simulate_replication` for every seed in ``seeds`` (``reps_per_seed``
    each; replication ``r`` of seed ``k`` draws from ``default_rng([k, r])``), as a pandas DataFrame with
    columns ``seed``, ``rep``, ``setting`` plus the metrics."""
    import pandas as pd

    reps_per_seed = _positive_int(reps_per_seed, "reps_per_seed")
    seeds = [int(v) for v in seeds]
    if not seeds:
        raise ValueError("seeds must be a non-empty list of ints")
    rows = []
    for seed in seeds:
        for rep in range(reps_per_seed):
            for record in simulate_replication(np.random.default_rng([seed, rep]), error, **kwargs):
                rows.append({"setting": error, "seed": seed, "rep": rep, **record})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------------------
# the claims' paired statistics, one pair of values per replication
# ------------------------------------------------------------------------------------------------
#: name -> (what the method side measures, what the competitor side measures); the claim is about the mean
#: of ``method - competitor`` over replications (a paired comparison on the same replication).
PAIRED_STATISTICS = {
    "n_ratio": ("log2 SMSqE(N)", "log2 SMSqE(CUT-np)"),
    "vs_r": ("log2 SMSqE(CUT-np)", "log2 SMSqE(R)"),
    "param": ("log2 SMSqE(N)", "log2 SMSqE(CUT-param)"),
    "maxae": ("SMaxAE(N)", "SMaxAE(CUT-np)"),
    "skdt": ("SKDT(CUT-np)", "SKDT(N)"),
    "sens": ("sensitivity(CUT-np)", "sensitivity(N)"),
    "bayes": ("min(|BA(Bayes) - BA(N)|, |BA(Bayes) - 1/2|)", "|BA(Bayes) - BA(CUT-np)|"),
}


def paired_statistics(results, setting: str) -> dict:
    r"""The paired per-replication values of the claims of one ``setting`` from :func:`run_simulation`'s
    records: ``{name: (a, b)}`` with ``a`` and ``b`` arrays over the replications that have both tasks
    (sorted by seed and replication), so that the claim is about the mean of ``a - b``
    (:data:`PAIRED_STATISTICS` names each side). SMSqE ratios enter as differences of :math:`\log_2`,
    so ``n_ratio`` > 1 reads "N's error is more than twice CUT's". BA is balanced accuracy (the mean of
    sensitivity and specificity); a constant classifier has BA 1/2 on any test set."""
    import pandas as pd

    if not isinstance(results, pd.DataFrame):
        raise TypeError(f"results must be the DataFrame of run_simulation, got {type(results).__name__}")
    missing = {"setting", "seed", "rep", "task", "method"} - set(results.columns)
    if missing:
        raise ValueError(f"results lacks the columns {sorted(missing)}")
    part = results[results.setting == setting]
    if part.empty:
        raise ValueError(f"no replications of setting {setting!r} in results")
    index = ["seed", "rep"]
    reg = part[part.task == "regression"]
    cls = part[part.task == "classification"]
    wide = lambda frame, metric: frame.pivot_table(index=index, columns="method", values=metric)
    se, mx, kd = wide(reg, "SMSqE"), wide(reg, "SMaxAE"), wide(reg, "SKDT")
    ba = wide(cls.assign(BA=(cls.sensitivity + cls.specificity) / 2), "BA")
    sens = wide(cls, "sensitivity")
    keep = se.index.intersection(ba.index)          # replications with both tasks (both classes in the test set)
    se, mx, kd, ba, sens = (t.loc[keep] for t in (se, mx, kd, ba, sens))
    log_se = np.log2(se)
    gap = lambda m: (ba["Bayes"] - ba[m]).abs()
    out = {
        "n_ratio": (log_se["N"], log_se["CUT-np"]),
        "vs_r": (log_se["CUT-np"], log_se["R"]),
        "param": (log_se["N"], log_se["CUT-param"]),
        "maxae": (mx["N"], mx["CUT-np"]),
        "skdt": (kd["CUT-np"], kd["N"]),
        "sens": (sens["CUT-np"], sens["N"]),
        "bayes": (np.minimum(gap("N"), (ba["Bayes"] - 0.5).abs()), gap("CUT-np")),
    }
    return {k: (np.asarray(a, dtype=float), np.asarray(b, dtype=float)) for k, (a, b) in out.items()}
