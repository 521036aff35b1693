r"""First stages: the law of :math:`Y` given :math:`X` that the CUT responses integrate over. Closed-form
responses under the true law (the "oracle"), Turnbull's NPMLE and its covariate-kernel-weighted version
(our stand-in for the paper's ICRF), and a parametric lognormal AFT with a B-spline mean."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import optimize, special, stats
from scipy.interpolate import BSpline

from .data import ERRORS, _as_1d, _intervals, _positive_int

__all__ = [
    "truncated_log_moments", "oracle_survival_status", "interval_membership", "self_consistency_em", "turnbull_npmle",
    "DiscreteLaw", "kernel_turnbull", "bspline_basis", "LognormalAFT",
]


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
