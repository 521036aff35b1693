r"""Boosting with interval-censored data: L2Boost-CUT and L2Boost-IMP.

Paper: Yuan Bian, Grace Y. Yi and Wenqing He, *Boosting Methods for Interval-censored Data with
Regression and Classification*, ICLR 2025 (OpenReview ``DzbUL4AJPP``; official R code
``krisyuanbian/L2BOOST-IC``). This package is an independent Python re-implementation.

A survival time :math:`Y>0` with covariates :math:`X` is only known to lie in an interval
:math:`(L, R]` formed by monitoring times (``L = 0``: left-censored; ``R = inf``: right-censored).
The target is :math:`f^\star(x) = E[g(Y)\mid X=x]` for a transform ``g`` (here :math:`\log Y`, or the
survival status :math:`2I(Y>s)-1` for classification). With a survivor-function estimate
:math:`S(\cdot\mid X)` the paper defines (its censoring-unbiased transformation, CUT)

.. math::
   \hat Y_k = E[g(Y)^k \mid L < Y \le R, X]
            = \frac{\int_{(L,R]} g(y)^k \, d\{-S(y\mid X)\}}{S(L\mid X) - S(R\mid X)}, \qquad k = 1, 2,

and the CUT loss :math:`L_{\rm CUT}(\mathcal O, f) = \tfrac12 \hat Y_2 - \hat Y_1 f + \tfrac12 f^2`,
whose expectation equals that of the full-data loss :math:`\tfrac12 (g(Y) - f)^2` (Prop. 1). L2Boost
(functional gradient descent, Buhlmann and Yu 2003) on the CUT loss has the negative gradient
:math:`\hat Y_1 - f` (Eq. 11), identical to ordinary L2Boost on the imputed response :math:`\hat Y_1`
(L2Boost-IMP, Eq. 14): the two differ only in the loss that the stopping rule monitors.

Contents, in the order of the chapter, one file per part:

* :mod:`.data` -- :func:`mean_function`, :func:`simulate_interval_censored` (the official ``datGen`` design);
* :mod:`.first_stage` -- closed-form CUT responses under a known law: :func:`truncated_log_moments`,
  :func:`oracle_survival_status`; first stages: :func:`turnbull_npmle` (Turnbull's self-consistency NPMLE),
  :func:`kernel_turnbull` (covariate-kernel-weighted NPMLE, our stand-in for the paper's ICRF),
  :class:`LognormalAFT` (a parametric interval-censored AFT with a B-spline mean);
* :mod:`.boosting` -- responses: :func:`cut_responses`, :func:`survival_status_responses`,
  :func:`naive_midpoint_response`; losses: :func:`cut_loss`, :func:`l2_loss`; boosting:
  :class:`PSplineSmoother` (base learner), :class:`L2BoostRegressor`, :class:`L2BoostClassifier`,
  :func:`l2boost_pspline_path` (closed-form path);
* :mod:`.experiment` -- metrics: :func:`regression_metrics`, :func:`sensitivity_specificity`; a baseline
  :func:`xgboost_aft_predict`; the book's simulation: :func:`simulate_replication`, :func:`run_simulation`.
"""

from .boosting import (L2BoostClassifier, L2BoostRegressor, PSplineSmoother, cut_loss, cut_responses, l2_loss,
                       l2boost_pspline_path, naive_midpoint_response, survival_status_responses)
from .data import ERRORS, IntervalCensoredData, mean_function, simulate_interval_censored
from .experiment import (CLASSIFICATION_METHODS, PAIRED_STATISTICS, REGRESSION_METHODS, paired_statistics,
                         regression_metrics, run_simulation, sensitivity_specificity, simulate_replication,
                         xgboost_aft_predict)
from .first_stage import (DiscreteLaw, LognormalAFT, bspline_basis, interval_membership, kernel_turnbull,
                          oracle_survival_status, self_consistency_em, truncated_log_moments, turnbull_npmle)

__all__ = [
    "IntervalCensoredData", "mean_function", "simulate_interval_censored",
    "truncated_log_moments", "oracle_survival_status",
    "interval_membership", "self_consistency_em", "turnbull_npmle", "DiscreteLaw", "kernel_turnbull",
    "bspline_basis", "LognormalAFT",
    "cut_responses", "survival_status_responses", "naive_midpoint_response",
    "cut_loss", "l2_loss", "PSplineSmoother", "L2BoostRegressor", "L2BoostClassifier",
    "l2boost_pspline_path", "regression_metrics", "sensitivity_specificity", "xgboost_aft_predict",
    "simulate_replication", "run_simulation", "paired_statistics", "PAIRED_STATISTICS", "REGRESSION_METHODS",
    "CLASSIFICATION_METHODS",
]
