r"""Boosting with interval-censored data: L2Boost-CUT and L2Boost-IMP.

Paper: Yuan Bian, Grace Y. Yi and Wenqing He, *Boosting Methods for Interval-censored Data with
Regression and Classification*, ICLR 2025 (OpenReview ``DzbUL4AJPP``; official R code
``krisyuanbian/L2BOOST-IC``). This module is an independent Python re-implementation.

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

Contents, in the order of the chapter:

* data: :func:`mean_function`, :func:`simulate_interval_censored` (the official ``datGen`` design);
* closed-form CUT responses under a known law: :func:`truncated_log_moments`,
  :func:`oracle_survival_status`;
* first stages: :func:`turnbull_npmle` (Turnbull's self-consistency NPMLE),
  :func:`kernel_turnbull` (covariate-kernel-weighted NPMLE, our stand-in for the paper's ICRF),
  :class:`LognormalAFT` (a parametric interval-censored AFT with a B-spline mean);
* responses: :func:`cut_responses`, :func:`survival_status_responses`, :func:`naive_midpoint_response`;
* boosting: :class:`PSplineSmoother` (base learner), :class:`L2BoostRegressor`,
  :class:`L2BoostClassifier`, :func:`l2boost_pspline_path` (closed-form path);
* losses and metrics: :func:`cut_loss`, :func:`l2_loss`, :func:`regression_metrics`,
  :func:`sensitivity_specificity`; a baseline :func:`xgboost_aft_predict`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import linalg, optimize, special, stats
from scipy.interpolate import BSpline
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.tree import DecisionTreeRegressor

from .common.validation import check_positive_int

__all__ = [
    "IntervalCensoredData", "mean_function", "simulate_interval_censored",
    "truncated_log_moments", "oracle_survival_status",
    "interval_membership", "self_consistency_em", "turnbull_npmle", "DiscreteLaw", "kernel_turnbull",
    "bspline_basis", "LognormalAFT",
    "cut_responses", "survival_status_responses", "naive_midpoint_response",
    "cut_loss", "l2_loss", "PSplineSmoother", "L2BoostRegressor", "L2BoostClassifier",
    "l2boost_pspline_path", "regression_metrics", "sensitivity_specificity", "xgboost_aft_predict",
    "simulate_replication", "run_simulation", "REGRESSION_METHODS", "CLASSIFICATION_METHODS",
]

ERRORS = ("lognormal", "loglogistic")


# ------------------------------------------------------------------------------------------------
# validation helpers
# ------------------------------------------------------------------------------------------------
def _as_1d(a, name: str, allow_inf: bool = False) -> np.ndarray:
    arr = np.asarray(a, dtype=float)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if np.isnan(arr).any():
        raise ValueError(f"{name} contains NaN")
    if not allow_inf and np.isinf(arr).any():
        raise ValueError(f"{name} contains infinite values")
    return arr


def _intervals(left, right) -> tuple[np.ndarray, np.ndarray]:
    L = _as_1d(left, "left", allow_inf=True)
    R = _as_1d(right, "right", allow_inf=True)
    if L.shape != R.shape:
        raise ValueError(f"left and right must have the same shape, got {L.shape} and {R.shape}")
    if (L < 0).any() or np.isinf(L).any():
        raise ValueError("left must be finite and >= 0")
    if not (L < R).all():
        raise ValueError("every interval must satisfy left < right")
    return L, R


_positive_int = check_positive_int  # shared with the other chapters (companion_lib.common.validation)


# ------------------------------------------------------------------------------------------------
# data
# ------------------------------------------------------------------------------------------------
def mean_function(x, b=(1.0, 0.8, 0.8)) -> np.ndarray:
    r""":math:`\mu(x) = b_0|x-0.5| + b_1 x^3 + b_2 \sin(\pi x)`, the paper's regression function
    (``datGen`` in the official code): the truth :math:`E[\log Y\mid X=x]` of the simulations."""
    x = _as_1d(x, "x")
    b0, b1, b2 = (float(v) for v in b)
    return b0 * np.abs(x - 0.5) + b1 * x**3 + b2 * np.sin(np.pi * x)


@dataclass
class IntervalCensoredData:
    """Simulated interval-censored sample: covariate ``x``, the hidden ``log_y``, the observed
    interval ``(left, right]`` that contains ``exp(log_y)``, and the truth ``mu = E[log Y | x]``."""

    x: np.ndarray
    log_y: np.ndarray
    left: np.ndarray
    right: np.ndarray
    mu: np.ndarray
    sigma: float
    error: str

    def __len__(self) -> int:
        return len(self.x)

    def subset(self, idx) -> "IntervalCensoredData":
        """The rows ``idx`` (an index array or boolean mask)."""
        return IntervalCensoredData(self.x[idx], self.log_y[idx], self.left[idx], self.right[idx],
                                    self.mu[idx], self.sigma, self.error)

    def split(self, test_fraction: float, rng: np.random.Generator):
        """Random (train, test) split; the official code holds out 20% as test."""
        if not 0 < test_fraction < 1:
            raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
        n_test = int(round(test_fraction * len(self)))
        perm = rng.permutation(len(self))
        return self.subset(np.sort(perm[n_test:])), self.subset(np.sort(perm[:n_test]))

    def censoring_summary(self) -> dict:
        """Fractions of left-censored (L = 0), right-censored (R = inf) and interval-censored rows."""
        left = float(np.mean(self.left == 0))
        right = float(np.mean(np.isinf(self.right)))
        return {"left-censored": left, "right-censored": right, "interval": 1.0 - left - right}


def simulate_interval_censored(n: int, rng: np.random.Generator, n_monitor: int = 3, tau: float = 6.0,
                               b=(1.0, 0.8, 0.8), sigma: float = 0.25,
                               error: str = "lognormal") -> IntervalCensoredData:
    r"""The paper's synthetic design (official ``datGen``).

    :math:`X\sim U(0,1)`, :math:`\log Y = \mu(X) + \varepsilon` with :math:`\varepsilon\sim N(0,\sigma^2)`
    (``"lognormal"``) or Logistic(0, :math:`\sigma`) (``"loglogistic"``); ``n_monitor`` sorted monitoring
    times :math:`U(0,\tau)` per subject; the observed interval is the one between consecutive monitoring
    times (with 0 and :math:`\infty` added) that contains :math:`Y`. ``n_monitor = 1`` is the
    current-status design.
    """
    n = _positive_int(n, "n")
    n_monitor = _positive_int(n_monitor, "n_monitor")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy Generator, got {type(rng).__name__}")
    if not tau > 0:
        raise ValueError(f"tau must be > 0, got {tau}")
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    if error not in ERRORS:
        raise ValueError(f"error must be one of {ERRORS}, got {error!r}")
    x = rng.uniform(0.0, 1.0, n)
    mu = mean_function(x, b)
    eps = rng.normal(0.0, sigma, n) if error == "lognormal" else rng.logistic(0.0, sigma, n)
    log_y = mu + eps
    visits = np.sort(rng.uniform(0.0, tau, (n, n_monitor)), axis=1)
    edges = np.concatenate([np.zeros((n, 1)), visits, np.full((n, 1), np.inf)], axis=1)
    k = (np.exp(log_y)[:, None] > edges).sum(axis=1)          # Y in (edges[k-1], edges[k]]
    rows = np.arange(n)
    return IntervalCensoredData(x, log_y, edges[rows, k - 1], edges[rows, k], mu, float(sigma), error)


# ------------------------------------------------------------------------------------------------
# the CUT responses under a known law (the "oracle" first stage)
# ------------------------------------------------------------------------------------------------
def _log_endpoints(L, R):
    with np.errstate(divide="ignore"):
        return np.log(L), np.log(R)                            # log 0 = -inf, log inf = inf


def truncated_log_moments(left, right, mu, sigma: float, error: str = "lognormal"):
    r"""Closed-form CUT responses :math:`E[\log Y \mid L<Y\le R]` and :math:`E[(\log Y)^2\mid L<Y\le R]`
    when :math:`\log Y = \mu + \varepsilon` with a known error law (Eq. of :math:`\hat Y_1,\hat Y_2`).

    For normal errors the truncated-normal moments: with :math:`\alpha=(\log L-\mu)/\sigma`,
    :math:`\beta=(\log R-\mu)/\sigma`, :math:`D=\Phi(\beta)-\Phi(\alpha)`,
    :math:`E[Z]=\mu+\sigma\frac{\phi(\alpha)-\phi(\beta)}{D}` and
    :math:`\mathrm{Var}[Z]=\sigma^2\big(1+\frac{\alpha\phi(\alpha)-\beta\phi(\beta)}{D}-
    (\frac{\phi(\alpha)-\phi(\beta)}{D})^2\big)`. For logistic errors, Gauss-Legendre quadrature in
    probability space, :math:`E[Z^k]=\frac1D\int_{F(\alpha)}^{F(\beta)}(\mu+\sigma F^{-1}(u))^k du`.
    """
    L, R = _intervals(left, right)
    mu = np.broadcast_to(_as_1d(np.atleast_1d(mu), "mu"), L.shape).astype(float)
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    if error not in ERRORS:
        raise ValueError(f"error must be one of {ERRORS}, got {error!r}")
    a, b = _log_endpoints(L, R)
    alpha, beta = (a - mu) / sigma, (b - mu) / sigma
    if error == "lognormal":
        # log D, computed in the tail where it is accurate
        upper = alpha > 0
        lo_, hi_ = np.where(upper, -beta, alpha), np.where(upper, -alpha, beta)
        log_hi = special.log_ndtr(hi_)
        log_D = log_hi + np.log1p(-np.exp(special.log_ndtr(lo_) - log_hi))
        phi_a = np.exp(stats.norm.logpdf(alpha) - log_D)       # phi(alpha)/D, 0 at +-inf
        phi_b = np.exp(stats.norm.logpdf(beta) - log_D)
        with np.errstate(invalid="ignore"):
            a_phi_a = np.where(np.isfinite(alpha), alpha * phi_a, 0.0)
            b_phi_b = np.where(np.isfinite(beta), beta * phi_b, 0.0)
        ratio = phi_a - phi_b
        mean_std = ratio
        var_std = np.maximum(1.0 + a_phi_a - b_phi_b - ratio**2, 0.0)
        y1 = mu + sigma * mean_std
        y2 = sigma**2 * var_std + y1**2
        return y1, y2
    nodes, weights = np.polynomial.legendre.leggauss(96)
    Fa, Fb = stats.logistic.cdf(alpha), stats.logistic.cdf(beta)
    u = Fa[:, None] + (Fb - Fa)[:, None] * (nodes[None, :] + 1.0) / 2.0
    z = mu[:, None] + sigma * stats.logistic.ppf(u)
    w = weights[None, :] / 2.0
    return (w * z).sum(axis=1), (w * z**2).sum(axis=1)


def _error_sf(z, error: str) -> np.ndarray:
    return stats.norm.sf(z) if error == "lognormal" else stats.logistic.sf(z)


def oracle_survival_status(left, right, mu, sigma: float, s: float, error: str = "lognormal"):
    r"""The classification response :math:`\hat Y_1 = 2\Pr(Y>s\mid L<Y\le R, X) - 1` under the true
    law: 1 if :math:`s\le L`, -1 if :math:`s\ge R`, else
    :math:`2\frac{S(s)-S(R)}{S(L)-S(R)}-1`."""
    L, R = _intervals(left, right)
    mu = np.broadcast_to(_as_1d(np.atleast_1d(mu), "mu"), L.shape)
    if not s > 0:
        raise ValueError(f"s must be > 0, got {s}")
    a, b = _log_endpoints(L, R)
    SL, SR = _error_sf((a - mu) / sigma, error), _error_sf((b - mu) / sigma, error)
    Ss = _error_sf((np.log(s) - mu) / sigma, error)
    return _status_from_survival(L, R, s, SL, SR, Ss)


def _status_from_survival(L, R, s, SL, SR, Ss):
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.clip((Ss - SR) / (SL - SR), 0.0, 1.0)
    p = np.where(SL - SR > 0, p, 0.5)
    p = np.where(s <= L, 1.0, np.where(s >= R, 0.0, p))
    return 2.0 * p - 1.0


# ------------------------------------------------------------------------------------------------
# nonparametric first stage: Turnbull's NPMLE and its covariate-kernel-weighted version
# ------------------------------------------------------------------------------------------------
def interval_membership(left, right, positions) -> np.ndarray:
    r"""Boolean matrix :math:`A_{ij} = I(L_i < t_j \le R_i)`: which support points ``t_j`` lie in
    each observed interval (the "clique" matrix of the self-consistency equations)."""
    L, R = _intervals(left, right)
    t = np.asarray(positions, dtype=float)
    if t.ndim != 1 or np.isnan(t).any():
        raise ValueError("positions must be a one-dimensional array without NaN")
    return (L[:, None] < t[None, :]) & (t[None, :] <= R[:, None])


def self_consistency_em(A, weights=None, max_iter: int = 500, tol: float = 1e-8) -> np.ndarray:
    r"""Turnbull's self-consistency EM for the (weighted) NPMLE of an interval-censored law.

    Maximises :math:`\sum_i w_{qi}\log\sum_j A_{ij}p_{qj}` over probability vectors :math:`p_q`, one
    per row ``q`` of ``weights`` (shape ``(Q, n)``; ``None``: one row of equal weights), by the update
    :math:`p_{qj}\leftarrow p_{qj}\sum_i \tilde w_{qi} A_{ij} / \sum_l A_{il} p_{ql}` with rows of
    :math:`\tilde w` normalised to one. Returns the masses, shape ``(Q, K)``.
    """
    A = np.asarray(A, dtype=float)
    if A.ndim != 2 or A.shape[0] == 0 or A.shape[1] == 0:
        raise ValueError(f"A must be a non-empty 2-D matrix, got shape {A.shape}")
    if (A.sum(axis=1) == 0).any():
        raise ValueError("every row of A must contain at least one support point")
    n, K = A.shape
    W = np.full((1, n), 1.0 / n) if weights is None else np.atleast_2d(np.asarray(weights, dtype=float))
    if W.shape[1] != n:
        raise ValueError(f"weights must have {n} columns (one per observation), got shape {W.shape}")
    if (W < 0).any() or not np.isfinite(W).all() or (W.sum(axis=1) <= 0).any():
        raise ValueError("weights must be finite, non-negative and have a positive sum per row")
    max_iter = _positive_int(max_iter, "max_iter")
    W = W / W.sum(axis=1, keepdims=True)
    P = np.full((W.shape[0], K), 1.0 / K)
    for _ in range(max_iter):
        D = P @ A.T                                            # (Q, n): mass of each interval
        P_new = P * ((W / D) @ A)
        done = np.max(np.abs(P_new - P)) < tol
        P = P_new
        if done:
            break
    return P


def turnbull_npmle(left, right, max_iter: int = 20000, tol: float = 1e-10):
    r"""Turnbull's (1976) NPMLE for interval-censored data ``(L_i, R_i]``.

    The support is the set of innermost intervals :math:`(q_j, p_j]` (a left endpoint immediately
    followed by a right endpoint when all endpoints are sorted, right endpoints first on ties);
    the masses solve the self-consistency equations (:func:`self_consistency_em`).

    Returns ``(q, p, masses)``. The survival function is determined outside the innermost
    intervals: :math:`S(t) = \sum_{j: q_j \ge t} \mathrm{mass}_j` for ``t`` not inside any ``(q_j, p_j)``.
    """
    L, R = _intervals(left, right)
    values = np.concatenate([L, R])
    kind = np.concatenate([np.ones_like(L), np.zeros_like(R)])  # 0 = right endpoint, 1 = left
    order = np.lexsort((kind, values))
    v, k = values[order], kind[order]
    starts = np.nonzero((k[:-1] == 1) & (k[1:] == 0))[0]
    q, p = v[starts], v[starts + 1]
    A = (L[:, None] <= q[None, :]) & (p[None, :] <= R[:, None])
    masses = self_consistency_em(A, max_iter=max_iter, tol=tol)[0]
    return q, p, masses


@dataclass
class DiscreteLaw:
    r"""A conditional law of :math:`Y` given :math:`X` with point masses: row ``i`` of ``masses`` is the
    law for subject ``i`` on the points ``support`` (the last point may be ``inf``: mass beyond the
    last monitoring time, whose ``g``-value is taken at ``tail_value``)."""

    support: np.ndarray
    masses: np.ndarray
    tail_value: float

    def values(self) -> np.ndarray:
        """Support points with the point at infinity replaced by ``tail_value``."""
        return np.where(np.isinf(self.support), self.tail_value, self.support)

    def survival(self, t) -> np.ndarray:
        r""":math:`S(t\mid x_i) = \sum_{j: t_j > t} m_{ij}` for every subject, shape ``(n, len(t))``."""
        t = np.atleast_1d(np.asarray(t, dtype=float))
        return self.masses @ (self.support[:, None] > t[None, :]).astype(float)


def _grid_membership(L, R, support):
    A = interval_membership(L, R, support)
    empty = ~A.any(axis=1)
    if empty.any():                                            # interval between two grid points:
        finite = np.isfinite(support)                          # use the nearest one to its midpoint
        a, b = _log_endpoints(L[empty], R[empty])
        lo = np.where(np.isfinite(a), a, b - 1.0)
        mid = (lo + b) / 2.0
        idx = np.argmin(np.abs(np.log(support[finite])[None, :] - mid[:, None]), axis=1)
        A[np.nonzero(empty)[0], idx] = True
    return A


def kernel_turnbull(x, left, right, x_eval=None, bandwidth: float = 0.08, n_grid: int = 60,
                    n_query: int = 41, max_iter: int = 200) -> DiscreteLaw:
    r"""A covariate-kernel-weighted Turnbull estimate of :math:`S(t\mid x)`: the book's nonparametric
    first stage, standing in for the paper's interval-censored recursive forest (ICRF, R only).

    At ``n_query`` query points :math:`x_q` it maximises the kernel-weighted log-likelihood
    :math:`\sum_i K_h(x_q-x_i)\log P_q(L_i<Y\le R_i)` over laws on a grid of ``n_grid`` log-spaced
    quantiles of the finite endpoints plus a point at infinity (:func:`self_consistency_em`), then
    interpolates the masses linearly in ``x`` to the rows of ``x_eval`` (default: ``x``).
    """
    x = _as_1d(x, "x")
    L, R = _intervals(left, right)
    if len(x) != len(L):
        raise ValueError(f"x and left must have the same length, got {len(x)} and {len(L)}")
    x_eval = x if x_eval is None else _as_1d(x_eval, "x_eval")
    if not bandwidth > 0:
        raise ValueError(f"bandwidth must be > 0, got {bandwidth}")
    n_grid, n_query = _positive_int(n_grid, "n_grid"), _positive_int(n_query, "n_query")
    ends = np.concatenate([L, R])
    ends = ends[np.isfinite(ends) & (ends > 0)]
    grid = np.unique(np.exp(np.quantile(np.log(ends), np.linspace(0, 1, n_grid))))
    support = np.append(grid, np.inf)
    A = _grid_membership(L, R, support).astype(float)
    xq = np.linspace(x.min(), x.max(), n_query) if n_query > 1 else np.array([x.mean()])
    W = np.exp(-0.5 * ((xq[:, None] - x[None, :]) / bandwidth) ** 2)
    P = self_consistency_em(A, W, max_iter=max_iter, tol=1e-9)
    if n_query > 1:
        pos = np.clip(np.interp(x_eval, xq, np.arange(n_query)), 0, n_query - 1)
        lo = np.floor(pos).astype(int)
        hi = np.minimum(lo + 1, n_query - 1)
        frac = (pos - lo)[:, None]
        masses = (1 - frac) * P[lo] + frac * P[hi]
    else:
        masses = np.repeat(P, len(x_eval), axis=0)
    return DiscreteLaw(support, masses / masses.sum(axis=1, keepdims=True), float(grid[-1]))


# ------------------------------------------------------------------------------------------------
# parametric first stage: lognormal AFT with a B-spline mean, by interval-censored ML
# ------------------------------------------------------------------------------------------------
def bspline_basis(x, n_basis: int = 8, lower: float = 0.0, upper: float = 1.0, degree: int = 3):
    """B-spline design matrix with ``n_basis`` columns on equally spaced knots that extend beyond
    [lower, upper] (Eilers and Marx's P-spline basis: rows sum to one, and coefficients in arithmetic
    progression give a straight line, so a second-difference penalty leaves lines unpenalised)."""
    x = _as_1d(x, "x")
    n_basis = _positive_int(n_basis, "n_basis")
    if n_basis <= degree:
        raise ValueError(f"n_basis must exceed degree={degree}, got {n_basis}")
    if not upper > lower:
        raise ValueError("upper must be > lower")
    n_seg = n_basis - degree
    step = (upper - lower) / n_seg
    knots = lower + step * np.arange(-degree, n_seg + degree + 1)
    x = np.clip(x, knots[degree], knots[n_basis])            # the basis' base interval, ~[lower, upper]
    return BSpline.design_matrix(x, knots, degree).toarray()


class LognormalAFT:
    r"""Parametric first stage: :math:`\log Y = B(x)^\top\theta + \sigma\varepsilon`, :math:`\varepsilon
    \sim N(0,1)`, fitted by maximising the interval-censored likelihood
    :math:`\sum_i \log\{\Phi(\beta_i)-\Phi(\alpha_i)\}` with L-BFGS (analytic gradient)."""

    def __init__(self, n_basis: int = 8):
        self.n_basis = _positive_int(n_basis, "n_basis")

    def fit(self, x, left, right) -> "LognormalAFT":
        x = _as_1d(x, "x")
        L, R = _intervals(left, right)
        if len(x) != len(L):
            raise ValueError("x and left must have the same length")
        self.lower_, self.upper_ = float(x.min()), float(x.max())
        B = bspline_basis(x, self.n_basis, self.lower_, self.upper_)
        a, b = _log_endpoints(L, R)
        mid = np.where(np.isfinite(a) & np.isfinite(b), (a + b) / 2, np.where(np.isfinite(a), a, b))
        theta0 = np.linalg.lstsq(B, mid, rcond=None)[0]
        start = np.append(theta0, np.log(np.std(mid) + 1e-3))

        def nll(par):
            m, sig = B @ par[:-1], np.exp(par[-1])
            alpha, beta = (a - m) / sig, (b - m) / sig
            upper = alpha > 0
            lo_, hi_ = np.where(upper, -beta, alpha), np.where(upper, -alpha, beta)
            log_hi = special.log_ndtr(hi_)
            log_D = log_hi + np.log1p(-np.exp(special.log_ndtr(lo_) - log_hi) + 1e-300)
            pa, pb = np.exp(stats.norm.logpdf(alpha) - log_D), np.exp(stats.norm.logpdf(beta) - log_D)
            with np.errstate(invalid="ignore"):
                apa = np.where(np.isfinite(alpha), alpha * pa, 0.0)
                bpb = np.where(np.isfinite(beta), beta * pb, 0.0)
            d_m = -(pb - pa) / sig                             # d log D / d m
            d_logsig = -(bpb - apa)
            return -log_D.sum(), -np.append(B.T @ d_m, d_logsig.sum())

        res = optimize.minimize(nll, start, jac=True, method="L-BFGS-B")
        self.theta_, self.sigma_ = res.x[:-1], float(np.exp(res.x[-1]))
        self.converged_ = bool(res.success)
        return self

    def predict_mean(self, x) -> np.ndarray:
        r"""The fitted :math:`E[\log Y\mid X=x] = B(x)^\top\hat\theta`."""
        return bspline_basis(x, self.n_basis, self.lower_, self.upper_) @ self.theta_

    def log_moments(self, x, left, right):
        """CUT responses under the fitted law (:func:`truncated_log_moments`)."""
        return truncated_log_moments(left, right, self.predict_mean(x), self.sigma_)


# ------------------------------------------------------------------------------------------------
# responses and losses
# ------------------------------------------------------------------------------------------------
def cut_responses(law: DiscreteLaw, left, right, g: Callable = np.log):
    r""":math:`\hat Y_k = \sum_{j: L<t_j\le R} g(t_j)^k m_{ij} / \sum_{j: L<t_j\le R} m_{ij}`, k = 1, 2:
    the CUT responses under an estimated discrete law (the integral in the definition of
    :math:`\hat Y_k` for a law with point masses)."""
    L, R = _intervals(left, right)
    if law.masses.shape[0] != len(L):
        raise ValueError(f"law has {law.masses.shape[0]} rows but there are {len(L)} intervals")
    A = _grid_membership(L, R, law.support)
    w = A * (law.masses + 1e-12)
    w = w / w.sum(axis=1, keepdims=True)
    gv = g(law.values())
    return w @ gv, w @ gv**2


def survival_status_responses(law: DiscreteLaw, left, right, s: float) -> np.ndarray:
    r"""Classification response :math:`2\Pr(Y>s\mid L<Y\le R,X)-1` under an estimated law."""
    L, R = _intervals(left, right)
    if not s > 0:
        raise ValueError(f"s must be > 0, got {s}")
    S = law.survival(np.array([s]))[:, 0]
    SL = (law.masses * (law.support[None, :] > L[:, None])).sum(axis=1)
    SR = (law.masses * (law.support[None, :] > R[:, None])).sum(axis=1)
    Ss = np.clip(S, SR, SL)
    return _status_from_survival(L, R, s, SL, SR, Ss)


def naive_midpoint_response(left, right) -> np.ndarray:
    r"""Naive imputation N: :math:`\log\frac{L+R}{2}`, and :math:`\log L` when :math:`R=\infty` (our
    choice; the paper does not say how N treats right-censored subjects)."""
    L, R = _intervals(left, right)
    return np.where(np.isinf(R), np.log(np.maximum(L, 1e-12)), np.log((L + np.where(np.isinf(R), 0, R)) / 2))


def cut_loss(y1, y2, f) -> float:
    r"""Empirical CUT loss :math:`\frac1n\sum_i \tfrac12\hat Y_{2i} - \hat Y_{1i} f_i + \tfrac12 f_i^2`."""
    y1, y2, f = _as_1d(y1, "y1"), _as_1d(y2, "y2"), _as_1d(f, "f")
    if not (y1.shape == y2.shape == f.shape):
        raise ValueError("y1, y2 and f must have the same shape")
    return float(np.mean(0.5 * y2 - y1 * f + 0.5 * f**2))


def l2_loss(y, f) -> float:
    r"""Empirical L2 loss :math:`\frac1n\sum_i \tfrac12 (y_i - f_i)^2`."""
    y, f = _as_1d(y, "y"), _as_1d(f, "f")
    if y.shape != f.shape:
        raise ValueError("y and f must have the same shape")
    return float(np.mean(0.5 * (y - f) ** 2))


# ------------------------------------------------------------------------------------------------
# base learner and L2Boost
# ------------------------------------------------------------------------------------------------
class PSplineSmoother:
    r"""Penalised cubic B-spline smoother :math:`\mathcal S = B(B^\top B+\lambda D^\top D)^{-1}B^\top`
    with a second-difference penalty; :math:`\lambda` is set by bisection so that
    :math:`\mathrm{tr}(\mathcal S) =` ``df`` (stands in for R's ``smooth.spline(df=20)``)."""

    def __init__(self, df: float = 20.0, n_basis: int = 40):
        self.df = float(df)
        self.n_basis = _positive_int(n_basis, "n_basis")
        if not 1.0 < self.df <= self.n_basis:
            raise ValueError(f"df must be in (1, n_basis={n_basis}], got {df}")

    def fit_design(self, x) -> "PSplineSmoother":
        """Build the basis on ``x`` and choose the penalty; afterwards :meth:`coef` fits residuals."""
        x = _as_1d(x, "x")
        self.lower_, self.upper_ = float(x.min()), float(x.max())
        B = bspline_basis(x, self.n_basis, self.lower_, self.upper_)
        G = B.T @ B
        Dm = np.diff(np.eye(self.n_basis), n=2, axis=0)
        P = Dm.T @ Dm

        # tr S(lam) = sum_j 1 / (1 + lam d_j) with P v = d (G + eps I) v: one eigenproblem, then bisection
        d = np.clip(linalg.eigh(P, G + 1e-8 * np.eye(self.n_basis), eigvals_only=True), 0.0, None)

        def trace(lam):
            return float(np.sum(1.0 / (1.0 + lam * d)))

        lo, hi = -8.0, 8.0                                     # bisection on log10(lambda)
        for _ in range(60):
            midpoint = (lo + hi) / 2
            if trace(10**midpoint) > self.df:
                lo = midpoint
            else:
                hi = midpoint
        self.lam_ = 10 ** ((lo + hi) / 2)
        self.B_, self.G_, self.P_ = B, G, P
        self.H_ = np.linalg.solve(G + self.lam_ * P + 1e-8 * np.eye(self.n_basis), B.T)  # (K, n)
        self.df_ = float(np.trace(B @ self.H_))
        ev, V = linalg.eigh(G, G + self.lam_ * P + 1e-8 * np.eye(self.n_basis))
        self.eig_ = (np.clip(ev, 1e-15, None), V)             # G v = s (G + lam P) v, V'(G + lam P)V = I
        return self

    def coef(self, r) -> np.ndarray:
        r"""Spline coefficients of the smoothed residual :math:`(B^\top B+\lambda P)^{-1}B^\top r`."""
        return self.H_ @ r

    def basis(self, x) -> np.ndarray:
        return bspline_basis(x, self.n_basis, self.lower_, self.upper_)

    def matrix(self) -> np.ndarray:
        r"""The smoother (hat) matrix :math:`\mathcal S` on the design points."""
        return self.B_ @ self.H_


class L2BoostRegressor(RegressorMixin, BaseEstimator):
    r"""L2Boost by functional gradient descent (Algorithm 1 of the paper).

    ``fit(X, y1, y2=None)``: ``y1`` is the response (complete-data :math:`g(Y)`, or :math:`\hat Y_1`);
    each step fits the base learner to the negative gradient :math:`y_1 - f` and updates
    :math:`f \leftarrow f + \nu\hat h`. ``loss="cut"`` monitors the CUT loss (needs ``y2``, i.e.
    :math:`\hat Y_2`; without it :math:`y_2=y_1^2` and the CUT loss is the L2 loss) - that is
    L2Boost-CUT; ``loss="imp"`` monitors the L2 loss on ``y1`` - L2Boost-IMP. With ``tol`` set, boosting
    stops (as in the official code) at the first step that changes the monitored training loss by
    less than ``tol``; ``n_estimators`` caps the number of steps. ``solver="loop"`` runs the steps one by
    one; ``"closed_form"`` (P-spline learner only) computes the same iterates and losses from one
    eigen-decomposition, which is much faster.

    Parameters: ``n_estimators``, ``learning_rate`` (:math:`\nu`, 0.01 in the paper's code),
    ``base_learner`` (``"pspline"``: 1-D smoothing spline with ``df`` degrees of freedom, or
    ``"tree"``: a regression tree of depth ``max_depth``), ``tol`` (``None``: run all steps).
    """

    def __init__(self, n_estimators: int = 100000, learning_rate: float = 0.01, base_learner: str = "pspline",
                 df: float = 20.0, n_basis: int = 40, max_depth: int = 2, loss: str = "cut",
                 tol: float | None = 1e-5, solver: str = "closed_form", random_state: int | None = 0):
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.base_learner = base_learner
        self.df = df
        self.n_basis = n_basis
        self.max_depth = max_depth
        self.loss = loss
        self.tol = tol
        self.solver = solver
        self.random_state = random_state

    def _check_params(self):
        _positive_int(self.n_estimators, "n_estimators")
        if not 0 < self.learning_rate <= 1:
            raise ValueError(f"learning_rate must be in (0, 1], got {self.learning_rate}")
        if self.base_learner not in ("pspline", "tree"):
            raise ValueError(f"base_learner must be 'pspline' or 'tree', got {self.base_learner!r}")
        if self.loss not in ("cut", "imp"):
            raise ValueError(f"loss must be 'cut' or 'imp', got {self.loss!r}")
        if self.solver not in ("closed_form", "loop"):
            raise ValueError(f"solver must be 'closed_form' or 'loop', got {self.solver!r}")
        if self.tol is not None and not self.tol > 0:
            raise ValueError(f"tol must be > 0 or None, got {self.tol}")

    @staticmethod
    def _check_X(X) -> np.ndarray:
        X = np.asarray(X, dtype=float)
        if X.ndim == 1:
            X = X[:, None]
        if X.ndim != 2 or X.shape[0] == 0:
            raise ValueError(f"X must be a non-empty 1-D or 2-D array, got shape {X.shape}")
        if not np.isfinite(X).all():
            raise ValueError("X contains NaN or infinite values")
        return X

    def _monitor(self, y1, y2, f) -> float:                   # cut_loss / l2_loss without re-validation
        if self.loss == "cut":
            return float(np.mean(0.5 * y2 - y1 * f + 0.5 * f * f))
        return float(np.mean(0.5 * (y1 - f) ** 2))

    def fit(self, X, y, y2=None) -> "L2BoostRegressor":
        self._check_params()
        X = self._check_X(X)
        y1 = _as_1d(y, "y")
        if len(y1) != len(X):
            raise ValueError(f"X and y must have the same length, got {len(X)} and {len(y1)}")
        y2 = y1**2 if y2 is None else _as_1d(y2, "y2")
        if y2.shape != y1.shape:
            raise ValueError("y2 must have the same shape as y")
        if self.base_learner == "pspline":
            if X.shape[1] != 1:
                raise ValueError("base_learner='pspline' needs a single feature; use 'tree' for more")
            self.smoother_ = PSplineSmoother(self.df, self.n_basis).fit_design(X[:, 0])
        if self.base_learner == "pspline" and self.solver == "closed_form":
            f, losses = self._boost_closed_form(y1, y2)
        else:
            f, losses = self._boost_loop(X, y1, y2)
        self.loss_path_ = np.array(losses)
        self.n_estimators_ = len(losses) - 1
        self.n_features_in_ = X.shape[1]
        self.fitted_train_ = f
        return self

    def _boost_loop(self, X, y1, y2):
        """Algorithm 1 step by step: fit the base learner to the negative gradient, take a step of size nu."""
        nu = self.learning_rate
        if self.base_learner == "pspline":
            self.coef_ = np.zeros(self.n_basis)
        else:
            self.trees_ = []
        f = np.zeros(len(y1))
        losses = [self._monitor(y1, y2, f)]
        for _ in range(self.n_estimators):
            r = y1 - f                                         # negative gradient (Eqs. 11 and 14)
            if self.base_learner == "pspline":
                c = self.smoother_.coef(r)
                f_new = f + nu * (self.smoother_.B_ @ c)
            else:
                tree = DecisionTreeRegressor(max_depth=self.max_depth, random_state=self.random_state)
                tree.fit(X, r)
                f_new = f + nu * tree.predict(X)
            new_loss = self._monitor(y1, y2, f_new)
            if self.tol is not None and abs(losses[-1] - new_loss) < self.tol:
                break                                          # stop before this step (official code)
            if self.base_learner == "pspline":
                self.coef_ = self.coef_ + nu * c
            else:
                self.trees_.append(tree)
            f = f_new
            losses.append(new_loss)
        return f, losses

    def _boost_closed_form(self, y1, y2, chunk: int = 2000):
        r"""The same iterates for the P-spline learner without the loop (see :func:`l2boost_pspline_path`):
        with :math:`a_{mj} = 1-(1-\nu s_j)^m` and :math:`w = V^\top B^\top y_1`, the fit is
        :math:`f_m = BV\,\mathrm{diag}(a_m/s)\,w` and the monitored loss is
        :math:`\ell_m = \ell_0 - \frac1n\sum_j a_{mj}w_j^2/s_j + \frac1{2n}\sum_j a_{mj}^2 w_j^2/s_j`,
        because :math:`(BV)^\top BV = \mathrm{diag}(s)`. The stopping step is found in chunks of ``chunk``."""
        sm, nu, n = self.smoother_, self.learning_rate, len(y1)
        s, V = sm.eig_
        w = V.T @ (sm.B_.T @ y1)
        base = self._monitor(y1, y2, np.zeros(n))
        stop = self.n_estimators
        losses = [base]
        for first in range(1, self.n_estimators + 1, chunk):
            m = np.arange(first, min(first + chunk, self.n_estimators + 1))
            a = 1.0 - (1.0 - nu * s)[None, :] ** m[:, None].astype(float)
            ell = base - (a @ (w**2 / s)) / n + 0.5 * ((a**2) @ (w**2 / s)) / n
            if self.tol is not None:
                change = np.abs(np.diff(np.concatenate([[losses[-1]], ell])))
                hit = np.nonzero(change < self.tol)[0]
                if hit.size:
                    losses.extend(ell[: hit[0]])
                    stop = first + hit[0] - 1
                    break
            losses.extend(ell)
        a_stop = 1.0 - (1.0 - nu * s) ** float(stop)
        self.coef_ = V @ (a_stop / s * w)
        return sm.B_ @ self.coef_, losses

    def predict(self, X) -> np.ndarray:
        if not hasattr(self, "n_estimators_"):
            raise ValueError("this L2BoostRegressor is not fitted yet; call fit first")
        X = self._check_X(X)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, expected {self.n_features_in_}")
        if self.base_learner == "pspline":
            return self.smoother_.basis(X[:, 0]) @ self.coef_
        out = np.zeros(len(X))
        for tree in self.trees_:
            out += self.learning_rate * tree.predict(X)
        return out


class L2BoostClassifier(L2BoostRegressor):
    r"""L2Boost for the survival status :math:`g(Y) = 2I(Y>s)-1` (the paper's classification variant):
    fit on the response :math:`\hat Y_1 = 2\Pr(Y>s\mid \mathcal O)-1`; the decision function is the
    boosted fit clipped to :math:`[-1, 1]`, the class is its sign (``+1``: survives past ``s``)."""

    def decision_function(self, X) -> np.ndarray:
        return np.clip(super().predict(X), -1.0, 1.0)

    def predict(self, X) -> np.ndarray:
        return np.where(self.decision_function(X) > 0, 1, -1)


def l2boost_pspline_path(smoother: PSplineSmoother, y, iterations, learning_rate: float = 0.01, x_eval=None):
    r"""Closed-form L2Boost path with a P-spline base learner (for many iterations at once).

    In coefficient space :math:`c_{m+1} = c_m + \nu M B^\top(y - Bc_m)`, :math:`M=(G+\lambda P)^{-1}`,
    :math:`G=B^\top B`. With the generalised eigenpairs :math:`Gv_j = s_j(G+\lambda P)v_j`,
    :math:`V^\top(G+\lambda P)V = I`: :math:`c_m = V\,\mathrm{diag}\{(1-(1-\nu s_j)^m)/s_j\}\,V^\top B^\top y`,
    so on the design points :math:`f_m = (I-(I-\nu\mathcal S)^m)\,y`. Returns ``(len(iterations), n_eval)``.
    """
    y = _as_1d(y, "y")
    its = np.atleast_1d(np.asarray(iterations))
    if (its < 0).any():
        raise ValueError("iterations must be >= 0")
    s, V = smoother.eig_
    proj = V.T @ (smoother.B_.T @ y)
    factor = (1 - (1 - learning_rate * s)[None, :] ** its[:, None].astype(float)) / s[None, :]
    coefs = (factor * proj[None, :]) @ V.T
    B = smoother.B_ if x_eval is None else smoother.basis(x_eval)
    return coefs @ B.T


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
