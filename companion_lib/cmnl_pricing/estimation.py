r"""Estimation, eqs. (6)-(7): the MNL Fisher information, the online-Newton estimator with its Gram
matrices, and the regularised maximum-likelihood fit."""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import minimize

from .model import _positive_int, _vector

__all__ = ["mnl_fisher", "OnlineMNLEstimator", "fit_mnl_mle"]


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
