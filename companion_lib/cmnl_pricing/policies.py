r"""Policies, eqs. (8)-(9), and baselines: UCBA-LCBP (Algorithm 1), TSA-LCBP (Algorithm 2),
explore-then-commit and censoring-unaware MNL pricing."""

from __future__ import annotations

import math

import numpy as np

from .model import _best, _positive_int, all_assortments, topk_assortment
from .estimation import OnlineMNLEstimator, _fisher, fit_mnl_mle

__all__ = [
    "thompson_sample_count", "Policy", "UCBLCBPolicy", "TSLCBPolicy", "ExploreThenCommit", "ExploreThenCommitLCB",
    "CensoringUnawarePricing",
]


def thompson_sample_count(N: int) -> int:
    r"""Number of optimistic Thompson samples :math:`M=\lceil 1-\log(2N)/\log(1-1/(4\sqrt{e\pi}))\rceil`.

    (Oh and Iyengar's count; the official code writes :math:`\log(e\pi)` for :math:`\sqrt{e\pi}`.)
    """
    N = _positive_int(N, "N")
    return math.ceil(1.0 - math.log(2 * N) / math.log(1.0 - 1.0 / (4.0 * math.sqrt(math.e * math.pi))))


class Policy:
    """Base class: ``reset`` on a market's features, then per round ``act`` -> (mask, prices) and ``update``."""

    name = "policy"

    def reset(self, X, W, K: int, T: int, rng: np.random.Generator) -> None:
        self.X, self.W = np.asarray(X, float), np.asarray(W, float)
        self.N, self.d = self.X.shape
        self.K, self.T, self.rng = K, T, rng
        self.masks = all_assortments(self.N, K) if self.assortment == "exact" else None
        self._mf = None if self.masks is None else self.masks.astype(float)

    assortment = "exact"

    def _choose(self, r, w) -> np.ndarray:
        if self.assortment == "exact":
            return _best(r, w, self.masks, self._mf)
        return topk_assortment(r, w, self.K)

    def act(self, t: int) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - abstract
        raise NotImplementedError

    def update(self, offered: np.ndarray, prices: np.ndarray, choice: int) -> None:  # pragma: no cover
        raise NotImplementedError


def _widths(A, V_inv) -> np.ndarray:
    r"""Row-wise Mahalanobis norms :math:`\lVert a_i\rVert_{V^{-1}}=\sqrt{a_i^\top V^{-1}a_i}` (confidence widths)."""
    return np.sqrt(np.maximum(((A @ V_inv) * A).sum(axis=1), 0.0))


def _check_common(beta: float, C: float, assortment: str) -> None:
    if not beta >= 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    if not C >= 1:
        raise ValueError(f"C must be >= 1, got {C}")
    if assortment not in ("exact", "topk"):
        raise ValueError(f"assortment must be 'exact' or 'topk', got {assortment!r}")


class _LCBPricing(Policy):
    """Shared part of Algorithms 1 and 2: online estimation, rarely switching estimate, LCB prices (8)."""

    def __init__(self, beta: float = 1.0, C: float = 1.01, assortment: str = "exact",
                 pricing: str = "lcb") -> None:
        _check_common(beta, C, assortment)
        if pricing not in ("lcb", "ucb"):
            raise ValueError(f"pricing must be 'lcb' or 'ucb', got {pricing!r}")
        self.beta, self.C, self.assortment, self.pricing = float(beta), float(C), assortment, pricing

    def reset(self, X, W, K, T, rng) -> None:
        super().reset(X, W, K, T, rng)
        self.est = OnlineMNLEstimator(self.d, K)
        self.theta_fix = self.est.theta.copy()
        self.det_fix = np.linalg.det(self.est.V)

    def _prices(self) -> tuple[np.ndarray, np.ndarray]:
        """Eq. (8): switch the pricing estimate when det V grew by C, then price at the valuation LCB."""
        est, d = self.est, self.d
        det = np.linalg.det(est.V)
        if det > self.C * self.det_fix:
            self.theta_fix, self.det_fix = est.theta.copy(), det
        width_x = _widths(self.X, np.linalg.inv(est.Vv))
        sign = -1.0 if self.pricing == "lcb" else 1.0
        prices = np.maximum(self.X @ self.theta_fix[:d] + sign * math.sqrt(self.C) * self.beta * width_x, 0.0)
        return prices, width_x

    def update(self, offered, prices, choice) -> None:
        idx = np.flatnonzero(offered)
        Z = np.hstack([self.X[idx], -prices[idx, None] * self.W[idx]])
        pos = -1 if choice < 0 else int(np.flatnonzero(idx == choice)[0])
        self.est.update(Z, pos)


class UCBLCBPolicy(_LCBPricing):
    r"""UCBA-LCBP (Algorithm 1): LCB prices (8) and the assortment maximising optimistic revenue,

    :math:`\bar u_i=z_i^\top\hat\theta+\beta\lVert z_i\rVert_{V^{-1}}+2\sqrt C\beta\lVert x_i\rVert_{(V^v)^{-1}}`,
    :math:`\bar v_i=x_i^\top\hat\theta_v+\beta\lVert x_i\rVert_{(V^v)^{-1}}`, :math:`S_t=\arg\max_S\sum_S\bar v_ie^{\bar u_i}/(1+\sum_Se^{\bar u_j})`.
    ``pricing="ucb"`` prices at the valuation's *upper* bound instead (a censoring-unsafe heuristic).
    """

    name = "UCBA-LCBP"

    def act(self, t: int):
        prices, width_x = self._prices()
        est, d = self.est, self.d
        Z = np.hstack([self.X, -prices[:, None] * self.W])
        width_z = _widths(Z, np.linalg.inv(est.V))
        u_bar = Z @ est.theta + self.beta * width_z + 2 * math.sqrt(self.C) * self.beta * width_x
        v_bar = self.X @ est.theta[:d] + self.beta * width_x
        return self._choose(v_bar, np.exp(u_bar)), prices


class TSLCBPolicy(_LCBPricing):
    r"""TSA-LCBP (Algorithm 2): LCB prices (8) and optimistic Thompson sampling for the assortment.

    :math:`M` draws :math:`\tilde\theta\sim\mathcal N(\hat\theta,2\beta^2V^{-1})`, :math:`\tilde\theta_v\sim\mathcal N(\hat\theta_v,\beta^2(V^v)^{-1})`;
    :math:`\bar v_i=\max_m x_i^\top\tilde\theta_v^{(m)}`, :math:`\bar u_i=\max_m z_i^\top\tilde\theta^{(m)}+C(\bar v_i-x_i^\top\hat\theta_v)`.
    """

    name = "TSA-LCBP"

    def reset(self, X, W, K, T, rng) -> None:
        super().reset(X, W, K, T, rng)
        self.M = thompson_sample_count(self.N)

    def act(self, t: int):
        prices, _ = self._prices()
        est, d, rng = self.est, self.d, self.rng
        Z = np.hstack([self.X, -prices[:, None] * self.W])
        L = np.linalg.cholesky(np.linalg.inv(est.V))
        Lv = np.linalg.cholesky(np.linalg.inv(est.Vv))
        thetas = est.theta + math.sqrt(2.0) * self.beta * rng.standard_normal((self.M, 2 * d)) @ L.T
        thetas_v = est.theta[:d] + self.beta * rng.standard_normal((self.M, d)) @ Lv.T
        v_bar = (self.X @ thetas_v.T).max(axis=1)
        u_bar = (Z @ thetas.T).max(axis=1) + self.C * (v_bar - self.X @ est.theta[:d])
        return self._choose(v_bar, np.exp(u_bar)), prices


class ExploreThenCommit(Policy):
    r"""Baseline: :math:`T_0=\mathrm{round}(T^{2/3})` rounds of random :math:`|S|=K` and prices :math:`U(0,1)`,
    a batch MLE that ignores censoring (:func:`fit_mnl_mle`, ridge 1), then the plug-in oracle forever."""

    name = "ETC"

    def __init__(self, T0: int | None = None, assortment: str = "exact") -> None:
        _check_common(0.0, 1.0, assortment)
        self.T0, self.assortment = T0, assortment

    def reset(self, X, W, K, T, rng) -> None:
        super().reset(X, W, K, T, rng)
        self.n_explore = round(T ** (2 / 3)) if self.T0 is None else _positive_int(self.T0, "T0")
        self.Z, self.choices, self.plan = [], [], None

    def act(self, t: int):
        if t < self.n_explore:
            mask = np.zeros(self.N, dtype=bool)
            mask[self.rng.choice(self.N, self.K, replace=False)] = True
            return mask, self.rng.uniform(0.0, 1.0, self.N)
        if self.plan is None:
            theta = fit_mnl_mle(np.array(self.Z), np.array(self.choices), lam=1.0)
            v_hat, a_hat = self.X @ theta[: self.d], self.W @ theta[self.d:]
            p = np.maximum(v_hat, 0.0)
            self.plan = (self._choose(p, np.exp(v_hat - a_hat * p)), p)
        return self.plan

    def update(self, offered, prices, choice) -> None:
        if self.plan is None and len(self.Z) < self.n_explore:
            idx = np.flatnonzero(offered)
            self.Z.append(np.hstack([self.X[idx], -prices[idx, None] * self.W[idx]]))
            self.choices.append(-1 if choice < 0 else int(np.flatnonzero(idx == choice)[0]))


class ExploreThenCommitLCB(Policy):
    r"""Censoring-aware explore-then-commit: exploration whose prices are never (or rarely) censored, a
    batch MLE, then the lower-confidence-bound prices of eq. (8) and the plug-in assortment, committed.

    The first half of the :math:`T_0=\mathrm{round}(T^{2/3})` exploration rounds offers random
    assortments of ``K`` products at price 0 (never censored, since :math:`v_i\ge0`), which identifies
    :math:`\theta_v`; the second half offers random assortments at random prices below the valuations'
    lower confidence bounds from the first half (:math:`p_i=U_i\,\underline v_i`, :math:`U_i\sim U(0,1)`),
    which identifies :math:`\theta_\alpha` without censoring with high probability. A ridge MLE
    (:func:`fit_mnl_mle`, ``lam``) on all exploration offers gives :math:`\hat\theta` and
    :math:`V=\lambda I+\sum_tH_t(\hat\theta)` (the Fisher information of the offers); it then commits to
    :math:`p_i=\max(x_i^\top\hat\theta_v-\beta\lVert x_i\rVert_{(V^v)^{-1}},0)` (eq. 8 with the batch
    estimate; :math:`V^v` is the top-left block of :math:`V`, as in Algorithm 1) and the assortment that
    maximises the plug-in revenue at those prices. Unlike :class:`ExploreThenCommit` (the paper's
    baseline, whose plug-in prices sit at the estimated valuations), it sells after committing.
    """

    name = "ETC-LCB"

    def __init__(self, beta: float = 1.0, T0: int | None = None, lam: float = 1.0, assortment: str = "exact") -> None:
        _check_common(beta, 1.0, assortment)
        if not lam > 0:
            raise ValueError(f"lam must be > 0, got {lam}")
        self.beta, self.T0, self.lam, self.assortment = float(beta), T0, float(lam), assortment

    def reset(self, X, W, K, T, rng) -> None:
        super().reset(X, W, K, T, rng)
        self.n_explore = round(T ** (2 / 3)) if self.T0 is None else _positive_int(self.T0, "T0")
        self.n_price_zero = max(self.n_explore // 2, 1)
        self.Z, self.choices, self.v_lcb, self.plan = [], [], None, None

    def _fit(self, Z, choices):
        """Ridge MLE and ``V = lam I + sum_t H_t`` at the estimate."""
        theta = fit_mnl_mle(Z, choices, lam=self.lam)
        V = self.lam * np.eye(Z.shape[2])
        for Zt in Z:
            V += _fisher(Zt, theta)[1]
        return theta, V

    def _lcb(self, theta_v, Vv) -> np.ndarray:
        return np.maximum(self.X @ theta_v - self.beta * _widths(self.X, np.linalg.inv(Vv)), 0.0)

    def act(self, t: int):
        if t < self.n_explore:
            mask = np.zeros(self.N, dtype=bool)
            mask[self.rng.choice(self.N, self.K, replace=False)] = True
            if t < self.n_price_zero:
                return mask, np.zeros(self.N)
            if self.v_lcb is None:                               # theta_v from the price-zero offers
                Z = np.array(self.Z)[:, :, : self.d]
                theta_v, Vv = self._fit(Z, np.array(self.choices))
                self.v_lcb = self._lcb(theta_v, Vv)
            return mask, self.rng.uniform(0.0, 1.0, self.N) * self.v_lcb
        if self.plan is None:
            theta, V = self._fit(np.array(self.Z), np.array(self.choices))
            p = self._lcb(theta[: self.d], V[: self.d, : self.d])
            v_hat, a_hat = self.X @ theta[: self.d], self.W @ theta[self.d:]
            self.plan = (self._choose(p, np.exp(v_hat - a_hat * p)), p)
        return self.plan

    def update(self, offered, prices, choice) -> None:
        if self.plan is None and len(self.Z) < self.n_explore:
            idx = np.flatnonzero(offered)
            self.Z.append(np.hstack([self.X[idx], -prices[idx, None] * self.W[idx]]))
            self.choices.append(-1 if choice < 0 else int(np.flatnonzero(idx == choice)[0]))


def _mnl_pricing(a, b, K: int) -> tuple[np.ndarray, np.ndarray, float]:
    r"""Optimal assortment and prices of an *uncensored* MNL with utilities :math:`a_i-b_ip_i`.

    :math:`p_i=1/b_i+B`, where :math:`B` solves :math:`B=\sum_{i\in S(B)}e^{a_i-b_iB-1}/b_i` with
    :math:`S(B)` the ``K`` largest terms; the right side decreases in :math:`B`, so the root is found by
    a vectorised grid search refined three times (precision :math:`B(0)/64^3`).
    """
    lo, hi = 0.0, float(np.sum(np.exp(a - 1.0) / b))     # B lies in [0, B(0)]
    for _ in range(3):
        grid = np.linspace(lo, hi, 65)
        g = np.exp(a[None, :] - b[None, :] * grid[:, None] - 1.0) / b[None, :]
        rhs = -np.partition(-g, K - 1, axis=1)[:, :K].sum(axis=1)
        k = int(np.searchsorted(-(rhs - grid), 0.0))       # first grid point with rhs < B
        lo, hi = grid[max(k - 1, 0)], grid[min(k, 64)]
    B = 0.5 * (lo + hi)
    g = np.exp(a - b * B - 1.0) / b
    mask = np.zeros(a.shape[0], dtype=bool)
    mask[np.argpartition(-g, K - 1)[:K]] = True
    return mask, 1.0 / b + B, B


class CensoringUnawarePricing(Policy):
    r"""Baseline in the spirit of DASP-MNL (Erginbas et al., 2023): optimistic MNL pricing that ignores censoring.

    It keeps the same online estimate, takes optimistic :math:`\bar v_i=\min(x_i^\top\hat\theta_v+\beta\lVert\cdot\rVert,1)`
    and :math:`\underline\alpha_i=\max(w_i^\top\hat\theta_\alpha-\beta\lVert\cdot\rVert,\alpha_{\min})` and plays the optimal
    uncensored-MNL policy :math:`p_i=1/\underline\alpha_i+B` (:func:`_mnl_pricing`). Under censoring these prices
    exceed every valuation when :math:`\alpha,v\le1`.
    """

    name = "censoring-unaware"

    def __init__(self, beta: float = 1.0, alpha_min: float = 0.1) -> None:
        _check_common(beta, 1.0, "topk")
        if not alpha_min > 0:
            raise ValueError(f"alpha_min must be > 0, got {alpha_min}")
        self.beta, self.alpha_min, self.assortment = float(beta), float(alpha_min), "topk"

    def reset(self, X, W, K, T, rng) -> None:
        super().reset(X, W, K, T, rng)
        self.est = OnlineMNLEstimator(self.d, K)

    def act(self, t: int):
        est, d = self.est, self.d
        wx = _widths(self.X, np.linalg.inv(est.V[:d, :d]))
        ww = _widths(self.W, np.linalg.inv(est.V[d:, d:]))
        a = np.minimum(self.X @ est.theta[:d] + self.beta * wx, 1.0)
        b = np.maximum(self.W @ est.theta[d:] - self.beta * ww, self.alpha_min)
        mask, prices, _ = _mnl_pricing(a, b, self.K)
        return mask, prices

    def update(self, offered, prices, choice) -> None:
        idx = np.flatnonzero(offered)
        Z = np.hstack([self.X[idx], -prices[idx, None] * self.W[idx]])
        self.est.update(Z, -1 if choice < 0 else int(np.flatnonzero(idx == choice)[0]))
