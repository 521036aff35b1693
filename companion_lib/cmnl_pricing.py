r"""Dynamic assortment selection and pricing under censored MNL feedback (Kim and Oh, ICLR 2025).

*Dynamic Assortment Selection and Pricing with Censored Preference Feedback*, Jung-hun Kim and
Min-hwan Oh, https://openreview.net/forum?id=DOXnqYLCcd (arXiv 2504.02324). This module is an
independent re-implementation; the official code (no licence) was read, not copied.

The censored multinomial logit (C-MNL) model. Product :math:`i\in[N]` has known features
:math:`x_i, w_i\in\mathbb R^d` and unknown parameters :math:`\theta_v,\theta_\alpha\in\mathbb R^d`:

.. math::  v_i = x_i^\top\theta_v \ \text{(valuation)}, \qquad
           \alpha_i = w_i^\top\theta_\alpha \ \text{(price sensitivity)}.                     (1)

The seller offers an assortment :math:`S`, :math:`|S|\le K`, at prices :math:`p`. The buyer drops every
product priced above its valuation, :math:`\tilde S=\{i\in S: p_i\le v_i\}`, and buys :math:`i\in\tilde S`
or nothing (:math:`i=0`) with

.. math::  P(i\mid S,p) = \frac{e^{v_i-\alpha_i p_i}}{1+\sum_{j\in\tilde S} e^{v_j-\alpha_j p_j}}.   (2)

Expected revenue :math:`R(S,p)=\sum_{i\in\tilde S} p_i P(i\mid S,p)` (3); regret
:math:`\mathrm{Reg}(T)=\sum_t R(S^*,p^*)-R(S_t,p_t)` (4). With :math:`0\le v_i,\alpha_i\le 1`,
:math:`\partial R/\partial p_i = P(i)\,(1-\alpha_i(p_i-R))>0` on :math:`[0,v_i]`, so :math:`p^*=v` and
:math:`S^*` maximises (3) at :math:`p=v` (5).

The learner writes the utility as :math:`z_i^\top\theta` with :math:`z_i=[x_i;-p_iw_i]`,
:math:`\theta=[\theta_v;\theta_\alpha]` (6), and keeps an online-Newton estimate :math:`\hat\theta_t` with
Gram matrices :math:`V_t` (in :math:`z`) and :math:`V^v_t` (in :math:`x`) (7). Its prices are lower
confidence bounds of the valuations, :math:`p_i=\max(x_i^\top\hat\theta_v-\sqrt C\beta\lVert x_i\rVert_{(V^v)^{-1}},0)`
(8), so offered products are almost never censored and the feedback is a plain MNL. The assortment is
chosen optimistically, by upper confidence bounds (UCBA-LCBP, Algorithm 1) or by the maximum of
:math:`M` Thompson samples (TSA-LCBP, Algorithm 2) (9).

Conventions in code: products are indexed ``0..N-1``; an assortment is a boolean mask of shape
``(N,)`` (or ``(M, N)`` for many); a purchase is an int, ``-1`` meaning "no purchase".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np
from scipy.optimize import minimize

from .common.validation import check_finite_vector, check_positive_int

__all__ = [
    "CensoredMNLEnv", "make_environment", "censored_choice_probabilities", "expected_revenue",
    "revenue_price_gradient", "all_assortments", "best_assortment", "topk_assortment",
    "oracle", "kappa", "mnl_fisher", "OnlineMNLEstimator", "fit_mnl_mle", "thompson_sample_count",
    "Policy", "UCBLCBPolicy", "TSLCBPolicy", "ExploreThenCommit", "CensoringUnawarePricing",
    "POLICY_NAMES", "make_policy", "simulate", "regret_curves", "growth_ratio", "loglog_slope",
    "curve_statistics", "paired_upper_bound", "seconds_per_round",
]


# --------------------------------------------------------------------------------------------------
# input checks
# --------------------------------------------------------------------------------------------------
_vector = check_finite_vector  # shared with the other chapters (companion_lib.common.validation)


_positive_int = check_positive_int


def _masks(offered, n: int) -> np.ndarray:
    m = np.asarray(offered)
    if m.dtype != bool:
        raise TypeError(f"offered must be a boolean mask, got dtype {m.dtype}")
    if m.ndim not in (1, 2) or m.shape[-1] != n:
        raise ValueError(f"offered must have shape (N,) or (M, N) with N={n}, got {m.shape}")
    return m


# --------------------------------------------------------------------------------------------------
# the C-MNL model, eqs. (1)-(5)
# --------------------------------------------------------------------------------------------------
def censored_choice_probabilities(v, alpha, prices, offered) -> np.ndarray:
    r"""Purchase probabilities of eq. (2) for one or many assortments.

    Parameters
    ----------
    v, alpha, prices:
        Valuations :math:`v`, price sensitivities :math:`\alpha` and prices :math:`p`, shape ``(N,)``.
    offered:
        Boolean mask ``(N,)`` or ``(M, N)``: the offered assortment(s) :math:`S`.

    Returns
    -------
    numpy.ndarray
        :math:`P(i\mid S,p)` with the shape of ``offered``; zero for products not offered or
        censored (:math:`p_i>v_i`). The no-purchase probability is ``1 - sum(...)``.
    """
    v = _vector(v, "v")
    n = v.shape[0]
    alpha = _vector(alpha, "alpha", n)
    prices = _vector(prices, "prices", n)
    return _censored_probs(v, alpha, prices, _masks(offered, n))


def _censored_probs(v, alpha, prices, mask):
    """Eq. (2) without input checks (the simulation's inner loop)."""
    kept = mask & (prices <= v)                       # the censored assortment S-tilde
    weights = np.where(kept, np.exp(v - alpha * prices), 0.0)
    return weights / (1.0 + weights.sum(axis=-1, keepdims=True))


def expected_revenue(v, alpha, prices, offered) -> np.ndarray | float:
    r"""Expected revenue :math:`R(S,p)=\sum_{i\in\tilde S}p_iP(i\mid S,p)` of eq. (3) (per assortment)."""
    q = censored_choice_probabilities(v, alpha, prices, offered)
    r = q @ np.asarray(prices, dtype=float)
    return float(r) if np.ndim(r) == 0 else r


def revenue_price_gradient(v, alpha, prices, offered) -> np.ndarray:
    r""":math:`\partial R/\partial p_i = P(i)\,(1-\alpha_i(p_i-R))` for uncensored offered products (eq. 5).

    Zero for products not offered or censored (where :math:`R` jumps, it has no derivative).
    """
    q = censored_choice_probabilities(v, alpha, prices, offered)
    R = float(q @ np.asarray(prices, dtype=float))
    return q * (1.0 - np.asarray(alpha, float) * (np.asarray(prices, float) - R))


def all_assortments(N: int, K: int) -> np.ndarray:
    """All non-empty assortments of at most ``K`` of ``N`` products, as a boolean ``(M, N)`` array."""
    N, K = _positive_int(N, "N"), _positive_int(K, "K")
    if K > N:
        raise ValueError(f"K must be <= N, got K={K}, N={N}")
    rows = [c for k in range(1, K + 1) for c in combinations(range(N), k)]
    masks = np.zeros((len(rows), N), dtype=bool)
    for m, c in enumerate(rows):
        masks[m, list(c)] = True
    return masks


def best_assortment(r, w, masks) -> np.ndarray:
    r"""Exact :math:`\arg\max_S \sum_{i\in S} r_iw_i/(1+\sum_{j\in S}w_j)` over the rows of ``masks``.

    With :math:`r=p=v` and :math:`w=e^{v-\alpha v}` this is the oracle of eq. (5); with the optimistic
    :math:`\bar v,\,e^{\bar u}` it is the assortment step of Algorithm 1. Returns one ``(N,)`` mask.
    """
    r, w = _vector(r, "r"), _vector(w, "w")
    if np.any(w < 0):
        raise ValueError("w (attraction weights) must be non-negative")
    masks = _masks(masks, r.shape[0])
    if masks.ndim != 2:
        raise ValueError("masks must be 2-D (M, N); build them with all_assortments")
    return _best(r, w, masks, masks.astype(float))


def _best(r, w, masks, mf):
    """:func:`best_assortment` without input checks; ``mf`` is ``masks`` as floats."""
    value = (mf @ (r * w)) / (1.0 + mf @ w)
    return masks[int(np.argmax(value))].copy()


def topk_assortment(r, w, K: int) -> np.ndarray:
    r"""The official code's shortcut: the ``K`` products with the largest :math:`r_iw_i` (not always optimal)."""
    r, w = _vector(r, "r"), _vector(w, "w", None)
    K = _positive_int(K, "K")
    if K > r.shape[0]:
        raise ValueError(f"K must be <= N, got K={K}, N={r.shape[0]}")
    mask = np.zeros(r.shape[0], dtype=bool)
    mask[np.argsort(-(r * w), kind="stable")[:K]] = True
    return mask


@dataclass
class CensoredMNLEnv:
    r"""A C-MNL market: features ``X`` (valuation), ``W`` (sensitivity), parameters, capacity ``K``.

    ``v = X @ theta_v`` and ``alpha = W @ theta_alpha`` (eq. 1). Features are fixed over the rounds,
    as in the paper's experiments.
    """

    X: np.ndarray
    W: np.ndarray
    theta_v: np.ndarray
    theta_alpha: np.ndarray
    K: int
    _opt: tuple | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.X = np.asarray(self.X, dtype=float)
        self.W = np.asarray(self.W, dtype=float)
        if self.X.ndim != 2 or self.W.shape != self.X.shape:
            raise ValueError(f"X and W must be 2-D arrays of equal shape (N, d), got {self.X.shape}, {self.W.shape}")
        if not (np.all(np.isfinite(self.X)) and np.all(np.isfinite(self.W))):
            raise ValueError("X and W must be finite")
        self.theta_v = _vector(self.theta_v, "theta_v", self.X.shape[1])
        self.theta_alpha = _vector(self.theta_alpha, "theta_alpha", self.X.shape[1])
        self.K = _positive_int(self.K, "K")
        if self.K > self.X.shape[0]:
            raise ValueError(f"K must be <= N, got K={self.K}, N={self.X.shape[0]}")

    @property
    def N(self) -> int:
        return self.X.shape[0]

    @property
    def d(self) -> int:
        return self.X.shape[1]

    @property
    def v(self) -> np.ndarray:
        r"""Valuations :math:`v_i=x_i^\top\theta_v`."""
        return self.X @ self.theta_v

    @property
    def alpha(self) -> np.ndarray:
        r"""Price sensitivities :math:`\alpha_i=w_i^\top\theta_\alpha`."""
        return self.W @ self.theta_alpha

    def probabilities(self, offered, prices) -> np.ndarray:
        """Eq. (2) for this market."""
        return censored_choice_probabilities(self.v, self.alpha, prices, offered)

    def revenue(self, offered, prices):
        """Eq. (3) for this market."""
        return expected_revenue(self.v, self.alpha, prices, offered)

    def sample_choice(self, offered, prices, rng: np.random.Generator) -> int:
        """One buyer's purchase: a product index, or ``-1`` for no purchase."""
        q = self.probabilities(offered, prices)
        if q.ndim != 1:
            raise ValueError("sample_choice takes one assortment of shape (N,)")
        u = rng.random()
        c = np.searchsorted(np.cumsum(q), u, side="right")
        return int(c) if c < self.N else -1

    def optimum(self) -> tuple[np.ndarray, np.ndarray, float]:
        r"""The clairvoyant :math:`(S^*, p^*, R^*)`: ``p* = max(v, 0)`` and exact enumeration of ``S``."""
        if self._opt is None:
            self._opt = oracle(self.v, self.alpha, self.K)
        S, p, R = self._opt
        return S.copy(), p.copy(), R


def make_environment(N: int, d: int, K: int, rng: np.random.Generator) -> CensoredMNLEnv:
    r"""The paper's synthetic market: :math:`\theta_v,\theta_\alpha,x_i,w_i\sim U(0,1)^d`, each scaled to unit norm.

    Hence :math:`0\le v_i,\alpha_i\le 1` and the optimal price is the valuation (eq. 5).
    """
    N, d, K = _positive_int(N, "N"), _positive_int(d, "d"), _positive_int(K, "K")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy Generator, got {type(rng).__name__}")

    def unit(shape):
        a = rng.uniform(0.0, 1.0, size=shape)
        return a / np.linalg.norm(a, axis=-1, keepdims=True)

    theta_v, theta_alpha = unit(d), unit(d)
    X, W = unit((N, d)), unit((N, d))
    return CensoredMNLEnv(X=X, W=W, theta_v=theta_v, theta_alpha=theta_alpha, K=K)


def oracle(v, alpha, K: int, masks: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, float]:
    r"""Exact clairvoyant policy (eq. 5): :math:`p^*=\max(v,0)`, :math:`S^*` by enumerating all :math:`|S|\le K`.

    Returns ``(mask, prices, revenue)``.
    """
    v = _vector(v, "v")
    alpha = _vector(alpha, "alpha", v.shape[0])
    if masks is None:
        masks = all_assortments(v.shape[0], K)
    p = np.maximum(v, 0.0)
    S = best_assortment(p, np.exp(v - alpha * p), masks)
    return S, p, float(expected_revenue(v, alpha, p, S))


def kappa(v, alpha, prices, masks) -> float:
    r"""The non-linearity constant :math:`\kappa=\min_{S,\,i\in S}P(i\mid S)P(0\mid S)` at the given prices.

    Computed without censoring (the learner's MNL), over the assortments in ``masks``.
    """
    v = _vector(v, "v")
    alpha, prices = _vector(alpha, "alpha", v.shape[0]), _vector(prices, "prices", v.shape[0])
    masks = _masks(masks, v.shape[0])
    w = np.where(masks, np.exp(v - alpha * prices), 0.0)
    denom = 1.0 + w.sum(axis=-1, keepdims=True)
    q, q0 = w / denom, 1.0 / denom
    prod = np.where(masks, q * q0, np.inf)
    return float(prod.min())


# --------------------------------------------------------------------------------------------------
# estimation, eqs. (6)-(7)
# --------------------------------------------------------------------------------------------------
def mnl_fisher(Z, theta) -> tuple[np.ndarray, np.ndarray]:
    r"""MNL probabilities and Fisher information of one offer: :math:`q_i=e^{z_i^\top\theta}/(1+\sum_j e^{z_j^\top\theta})`,
    :math:`H=\sum_i q_iz_iz_i^\top-(\sum_iq_iz_i)(\sum_iq_iz_i)^\top`.

    ``Z`` is ``(m, p)`` (the offered products' features), ``theta`` is ``(p,)``.
    """
    Z = np.asarray(Z, dtype=float)
    theta = _vector(theta, "theta")
    if Z.ndim != 2 or Z.shape[1] != theta.shape[0]:
        raise ValueError(f"Z must be 2-D with {theta.shape[0]} columns, got shape {Z.shape}")
    return _fisher(Z, theta)


def _fisher(Z, theta):
    """:func:`mnl_fisher` without input checks."""
    u = Z @ theta
    top = max(0.0, u.max())
    e = np.exp(u - top)
    q = e / (np.exp(-top) + e.sum())
    mean = q @ Z
    H = (Z * q[:, None]).T @ Z - np.outer(mean, mean)
    return q, H


class OnlineMNLEstimator:
    r"""Online-Newton estimate of :math:`\theta=[\theta_v;\theta_\alpha]` from MNL feedback (eq. 7).

    One step per round, with gradient :math:`g_t=\sum_{i\in S_t}(q_i-y_i)z_i` and :math:`\tilde V_t=V_t+\eta H_t`:

    .. math:: \hat\theta_{t+1}=\Pi\big(\hat\theta_t-\eta\tilde V_t^{-1}g_t\big),\qquad V_{t+1}=V_t+H_t,\qquad
              V^v_{t+1}=V^v_t+H^v_t,

    :math:`\Pi` projecting each :math:`d`-block onto the unit ball. Constants as in the official code:
    :math:`\eta=\tfrac12\log(K+1)+3`, :math:`\lambda=\max(d\eta,\eta)`. (The reference code approximates the
    proximal step with five small gradient steps; we use its closed form.)
    """

    def __init__(self, d: int, K: int, eta: float | None = None, lam: float | None = None) -> None:
        self.d, self.K = _positive_int(d, "d"), _positive_int(K, "K")
        self.eta = 0.5 * math.log(K + 1) + 3.0 if eta is None else float(eta)
        self.lam = max(d * self.eta, self.eta) if lam is None else float(lam)
        if not (self.eta > 0 and self.lam > 0):
            raise ValueError(f"eta and lam must be positive, got eta={self.eta}, lam={self.lam}")
        self.theta = np.zeros(2 * d)
        self.V = self.lam * np.eye(2 * d)
        self.n_updates = 0

    def update(self, Z, choice: int) -> np.ndarray:
        """One online-Newton step on the offer ``Z`` ``(m, 2d)`` with purchase position ``choice`` (-1: none)."""
        Z = np.asarray(Z, dtype=float)
        if Z.ndim != 2 or Z.shape[1] != 2 * self.d:
            raise ValueError(f"Z must have shape (m, {2 * self.d}), got {Z.shape}")
        if isinstance(choice, bool) or not isinstance(choice, (int, np.integer)) or not -1 <= choice < Z.shape[0]:
            raise ValueError(f"choice must be an int in [-1, {Z.shape[0] - 1}], got {choice!r}")
        q, H = _fisher(Z, self.theta)
        y = np.zeros(Z.shape[0])
        if choice >= 0:
            y[choice] = 1.0
        g = (q - y) @ Z
        theta = self.theta - self.eta * np.linalg.solve(self.V + self.eta * H, g)
        for block in (slice(0, self.d), slice(self.d, 2 * self.d)):
            norm = np.linalg.norm(theta[block])
            if norm > 1.0:
                theta[block] /= norm
        self.theta = theta
        self.V = self.V + H
        self.n_updates += 1
        return self.theta

    @property
    def Vv(self) -> np.ndarray:
        r""":math:`V^v_t=\lambda I+\sum_sH^v_s`. Since :math:`z=[x;-pw]`, :math:`H^v` is the top-left block of
        :math:`H`, so :math:`V^v_t` is the top-left :math:`d\times d` block of :math:`V_t`."""
        return self.V[: self.d, : self.d]


def fit_mnl_mle(Z, choices, lam: float = 1.0) -> np.ndarray:
    r"""Batch ridge MLE of a plain (censoring-unaware) MNL: :math:`\min_\theta \sum_t \ell_t(\theta)+\tfrac\lambda2\lVert\theta\rVert^2`.

    ``Z`` is ``(n, m, p)`` (``n`` offers of ``m`` products), ``choices`` ``(n,)`` in ``[-1, m)``.
    Used by the explore-then-commit baseline and as a reference for the online estimator.
    """
    Z = np.asarray(Z, dtype=float)
    choices = np.asarray(choices)
    if Z.ndim != 3:
        raise ValueError(f"Z must be 3-D (n, m, p), got shape {Z.shape}")
    if choices.shape != (Z.shape[0],) or not np.issubdtype(choices.dtype, np.integer):
        raise ValueError(f"choices must be an int array of shape ({Z.shape[0]},)")
    if np.any(choices < -1) or np.any(choices >= Z.shape[1]):
        raise ValueError(f"choices must lie in [-1, {Z.shape[1] - 1}]")
    if lam < 0:
        raise ValueError(f"lam must be >= 0, got {lam}")
    Y = np.zeros(Z.shape[:2])
    bought = choices >= 0
    Y[np.flatnonzero(bought), choices[bought]] = 1.0

    def objective(theta):
        u = Z @ theta                                   # (n, m)
        top = np.maximum(u.max(axis=1), 0.0)
        e = np.exp(u - top[:, None])
        denom = np.exp(-top) + e.sum(axis=1)
        logp = np.where(bought, u[np.arange(len(u)), np.maximum(choices, 0)], 0.0) - top - np.log(denom)
        q = e / denom[:, None]
        grad = np.einsum("nm,nmp->p", q - Y, Z) + lam * theta
        return -logp.sum() + 0.5 * lam * theta @ theta, grad

    res = minimize(objective, np.zeros(Z.shape[2]), jac=True, method="L-BFGS-B")
    return res.x


# --------------------------------------------------------------------------------------------------
# policies, eqs. (8)-(9) and baselines
# --------------------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------------------
# experiments
# --------------------------------------------------------------------------------------------------
def simulate(env: CensoredMNLEnv, policy: Policy, T: int, rng: np.random.Generator) -> dict:
    r"""Run ``policy`` for ``T`` rounds on ``env``; returns per-round expected regret (eq. 4) and diagnostics.

    Keys: ``regret`` ``(T,)`` (:math:`R^*-R(S_t,p_t)`), ``censored`` ``(T,)`` (fraction of the offered
    products priced above valuation), ``revenue_star`` (:math:`R^*`).
    """
    T = _positive_int(T, "T")
    if not isinstance(env, CensoredMNLEnv):
        raise TypeError(f"env must be a CensoredMNLEnv, got {type(env).__name__}")
    if not isinstance(policy, Policy):
        raise TypeError(f"policy must be a Policy, got {type(policy).__name__}")
    _, _, R_star = env.optimum()
    v, alpha = env.v, env.alpha
    policy.reset(env.X, env.W, env.K, T, rng)
    regret, censored = np.empty(T), np.empty(T)
    for t in range(T):
        offered, prices = policy.act(t)
        if offered.sum() > env.K:
            raise RuntimeError(f"{policy.name} offered {offered.sum()} > K products")
        q = _censored_probs(v, alpha, prices, offered)
        regret[t] = R_star - q @ prices
        censored[t] = np.mean(prices[offered] > v[offered])
        c = int(np.searchsorted(np.cumsum(q), rng.random(), side="right"))
        policy.update(offered, prices, c if c < env.N else -1)
    return {"regret": regret, "censored": censored, "revenue_star": R_star}


POLICY_NAMES = ("UCBA-LCBP", "TSA-LCBP", "ETC", "censoring-unaware", "UCB-price heuristic")


def make_policy(name: str, beta: float = 1.0, assortment: str = "exact") -> Policy:
    """A fresh policy by name (one of :data:`POLICY_NAMES`) with confidence multiplier ``beta``.

    ``assortment`` is ``"exact"`` (enumerate every assortment of at most ``K`` products, this book's
    default) or ``"topk"`` (the official code's shortcut); the censoring-unaware baseline always uses
    its own top-``K`` rule.
    """
    _check_common(beta, 1.0, assortment)
    if name == "UCBA-LCBP":
        return UCBLCBPolicy(beta=beta, assortment=assortment)
    if name == "TSA-LCBP":
        return TSLCBPolicy(beta=beta, assortment=assortment)
    if name == "ETC":
        return ExploreThenCommit(assortment=assortment)
    if name == "censoring-unaware":
        return CensoringUnawarePricing(beta=beta)
    if name == "UCB-price heuristic":
        policy = UCBLCBPolicy(beta=beta, pricing="ucb", assortment=assortment)
        policy.name = name
        return policy
    raise ValueError(f"name must be one of {POLICY_NAMES}, got {name!r}")


def regret_curves(policy, N: int, d: int, K: int, T: int, seeds, beta: float = 1.0) -> dict:
    """Cumulative regret ``(len(seeds), T)`` of a policy on one fresh market per seed.

    ``policy`` is a name for :func:`make_policy` (with ``beta``) or a zero-argument factory. The market
    of seed ``s`` is ``make_environment(N, d, K, default_rng(s))``, the same for every policy; the
    policy's randomness uses ``default_rng(s + 1000)``.
    """
    if isinstance(policy, str):
        name = policy
        make_policy(name, beta)                                  # validate the name early

        def factory():
            return make_policy(name, beta)
    elif callable(policy):
        factory = policy
    else:
        raise TypeError(f"policy must be a policy name or a factory, got {type(policy).__name__}")
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds must be a non-empty list of ints")
    cum, cens, rstar = [], [], []
    for s in seeds:
        env = make_environment(N, d, K, np.random.default_rng(s))
        out = simulate(env, factory(), T, np.random.default_rng(s + 1000))
        cum.append(np.cumsum(out["regret"]))
        cens.append(out["censored"])
        rstar.append(out["revenue_star"])
    return {"cumulative": np.array(cum), "censored": np.array(cens), "revenue_star": np.array(rstar)}


def growth_ratio(cumulative) -> np.ndarray:
    r""":math:`(\mathrm{Reg}(T)-\mathrm{Reg}(T/2))/\mathrm{Reg}(T/2)` per row: 0.41 for :math:`\sqrt T`, 1 for linear growth."""
    c = np.atleast_2d(np.asarray(cumulative, dtype=float))
    T = c.shape[1]
    if T < 2:
        raise ValueError("cumulative must have at least 2 rounds")
    half = c[:, T // 2 - 1]
    return (c[:, -1] - half) / np.maximum(half, 1e-12)


def loglog_slope(cumulative, start: float = 0.25) -> float:
    r"""Least-squares slope of :math:`\log\mathrm{Reg}(t)` on :math:`\log t` over :math:`t\in[\mathrm{start}\cdot T, T]` (0.5 for :math:`\sqrt T`)."""
    c = np.asarray(cumulative, dtype=float)
    if c.ndim != 1:
        raise ValueError("cumulative must be 1-D (e.g. the mean over seeds)")
    if not 0 < start < 1:
        raise ValueError(f"start must be in (0, 1), got {start}")
    t = np.arange(1, c.shape[0] + 1)
    keep = (t >= start * c.shape[0]) & (c > 0)
    if keep.sum() < 2:
        raise ValueError("not enough positive points to fit a slope")
    return float(np.polyfit(np.log(t[keep]), np.log(c[keep]), 1)[0])


def curve_statistics(cumulative) -> dict:
    r"""Shape and level of a set of cumulative-regret curves ``(seeds, T)``.

    Returns ``reg_T`` (per-seed :math:`\mathrm{Reg}(T)`), ``mean_T`` (their mean), ``ratio``
    (:func:`growth_ratio` of the mean curve) and ``slope`` (:func:`loglog_slope` of the mean curve).
    """
    c = np.atleast_2d(np.asarray(cumulative, dtype=float))
    mean = c.mean(axis=0)
    return {"reg_T": c[:, -1].copy(), "mean_T": float(c[:, -1].mean()),
            "ratio": float(growth_ratio(mean)[0]), "slope": loglog_slope(mean)}


def paired_upper_bound(a, b, z: float = 1.96) -> float:
    r"""Upper end of the normal ``z``-interval for the mean of the paired differences ``a - b``.

    Negative means ``a`` is smaller than ``b`` with the paper's 95% confidence (its figure draws
    :math:`\pm1.96` standard errors over repeats). With a single pair the interval is unbounded.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise ValueError(f"a and b must be 1-D arrays of the same non-zero length, got {a.shape} and {b.shape}")
    if not z > 0:
        raise ValueError(f"z must be > 0, got {z}")
    diff = a - b
    if diff.size < 2:
        return math.inf
    return float(diff.mean() + z * diff.std(ddof=1) / math.sqrt(diff.size))


def seconds_per_round(name: str, N: int, d: int, K: int, rounds: int = 100, beta: float = 1.0,
                      assortment: str = "exact", seed: int = 0) -> float:
    """CPU seconds per round of policy ``name`` (policy step plus simulator), measured on a short run.

    Runs ``rounds // 5`` and ``rounds`` rounds on the same market and divides the difference of their
    CPU times by the difference of their lengths, so the one-off costs of a run (building the
    assortment table, the oracle) cancel. Used to estimate the cost of the paper's full scale.
    """
    import time

    rounds = _positive_int(rounds, "rounds")
    if rounds < 10:
        raise ValueError(f"rounds must be >= 10, got {rounds}")
    env = make_environment(N, d, K, np.random.default_rng(seed))
    env.optimum()                                    # computed once per market (cached), not per round
    cpu = []
    for length in (rounds // 5, rounds):
        policy = make_policy(name, beta, assortment)
        start = time.process_time()
        simulate(env, policy, length, np.random.default_rng(seed + 1000))
        cpu.append(time.process_time() - start)
    return max(cpu[1] - cpu[0], 0.0) / (rounds - rounds // 5)
