r"""The same policies on many markets at once: the book's simulations, vectorised over markets.

:func:`~companion_lib.cmnl_pricing.experiment.simulate` runs one policy on one market, one round at a time;
a round costs a few dozen small numpy calls, so most of its time is Python overhead. Here every market of
a run advances in lockstep: the state of market :math:`b` (estimate, Gram matrix, prices) is row :math:`b`
of a stacked array, and one numpy call serves all markets. The algorithms are those of
:mod:`~companion_lib.cmnl_pricing.policies`, step for step: each market keeps its own random generator and
draws from it in the same order as :func:`simulate` does (the policy's draws of a round, then the buyer's
choice), so a batched run follows the same trajectories; the tests check that it reproduces the
one-market runs (up to rounding in the last digits of the floating-point sums, which never changes a
choice in practice). Offered sets are boolean masks over all ``N`` products; products not offered enter
every sum with weight zero.
"""

from __future__ import annotations

import math

import numpy as np

from .estimation import OnlineMNLEstimator
from .model import _first_best, _positive_int, all_assortments, make_environment
from .policies import ExploreThenCommit, ExploreThenCommitLCB, _check_common, thompson_sample_count

__all__ = ["BATCHED_POLICIES", "batched_regret_curves"]

#: Policy names (:data:`~companion_lib.cmnl_pricing.experiment.POLICY_NAMES`) with a batched implementation.
BATCHED_POLICIES = ("UCBA-LCBP", "TSA-LCBP", "ETC", "ETC-LCB", "UCB-price heuristic")


def _widths(A, V_inv):
    r"""Row-wise :math:`\lVert a_{bi}\rVert_{V_b^{-1}}` for stacks ``A`` ``(B, N, p)`` and ``V_inv`` ``(B, p, p)``."""
    return np.sqrt(np.maximum(((A @ V_inv) * A).sum(axis=-1), 0.0))


def _best(r, w, masks, mf):
    """Exact assortment per market: ``argmax_S sum_S r w / (1 + sum_S w)`` for ``r, w`` ``(B, N)``."""
    value = ((r * w) @ mf.T) / (1.0 + w @ mf.T)
    return masks[_first_best(value)]


def _topk(r, w, K):
    score = r * w
    out = np.zeros(score.shape, dtype=bool)
    idx = np.argsort(-score, axis=1, kind="stable")[:, :K]
    np.put_along_axis(out, idx, True, axis=1)
    return out


class _Batch:
    """Shared state: the markets' features, their capacity and the assortment table."""

    def __init__(self, X, W, K, T, rngs, assortment):
        self.X, self.W = X, W
        self.B, self.N, self.d = X.shape
        self.K, self.T, self.rngs = K, T, rngs
        self.assortment = assortment
        self.masks = all_assortments(self.N, K) if assortment == "exact" else None
        self.mf = None if self.masks is None else self.masks.astype(float)

    def choose(self, r, w):
        if self.assortment == "exact":
            return _best(r, w, self.masks, self.mf)
        return _topk(r, w, self.K)

    def features(self, prices):
        """:math:`z_{bi}=[x_{bi};-p_{bi}w_{bi}]`, shape ``(B, N, 2d)``."""
        return np.concatenate([self.X, -prices[..., None] * self.W], axis=-1)


class _BatchLCB(_Batch):
    """UCBA-LCBP, TSA-LCBP and the UCB-price heuristic (:class:`~.policies.UCBLCBPolicy`,
    :class:`~.policies.TSLCBPolicy`), with the online-Newton estimator of eq. (7) for every market."""

    def __init__(self, X, W, K, T, rngs, kind, beta=1.0, C=1.01, assortment="exact"):
        super().__init__(X, W, K, T, rngs, assortment)
        _check_common(beta, C, assortment)
        self.kind, self.beta, self.C = kind, float(beta), float(C)
        est = OnlineMNLEstimator(self.d, K)                     # the constants eta and lambda
        self.eta = est.eta
        self.theta = np.zeros((self.B, 2 * self.d))
        self.V = np.broadcast_to(est.V, (self.B, 2 * self.d, 2 * self.d)).copy()
        self.theta_fix = self.theta.copy()
        self.det_fix = np.linalg.det(self.V)
        self.M = thompson_sample_count(self.N)

    def _prices(self):
        d = self.d
        det = np.linalg.det(self.V)
        switch = det > self.C * self.det_fix
        self.theta_fix[switch], self.det_fix[switch] = self.theta[switch], det[switch]
        width_x = _widths(self.X, np.linalg.inv(self.V[:, :d, :d]))
        sign = 1.0 if self.kind == "heuristic" else -1.0
        v_hat = (self.X @ self.theta_fix[:, :d, None])[..., 0]
        return np.maximum(v_hat + sign * math.sqrt(self.C) * self.beta * width_x, 0.0), width_x

    def act(self, t):
        prices, width_x = self._prices()
        d, beta, C = self.d, self.beta, self.C
        Z = self.features(prices)
        v_now = (self.X @ self.theta[:, :d, None])[..., 0]
        if self.kind == "ts":
            L = np.linalg.cholesky(np.linalg.inv(self.V))
            Lv = np.linalg.cholesky(np.linalg.inv(self.V[:, :d, :d]))
            noise = np.empty((self.B, self.M, 2 * d))
            noise_v = np.empty((self.B, self.M, d))
            for b, rng in enumerate(self.rngs):                 # each market's draws, in simulate's order
                noise[b] = rng.standard_normal((self.M, 2 * d))
                noise_v[b] = rng.standard_normal((self.M, d))
            thetas = self.theta[:, None, :] + math.sqrt(2.0) * beta * noise @ L.transpose(0, 2, 1)
            thetas_v = self.theta[:, None, :d] + beta * noise_v @ Lv.transpose(0, 2, 1)
            v_bar = (self.X @ thetas_v.transpose(0, 2, 1)).max(axis=2)
            u_bar = (Z @ thetas.transpose(0, 2, 1)).max(axis=2) + C * (v_bar - v_now)
        else:
            width_z = _widths(Z, np.linalg.inv(self.V))
            u_bar = (Z @ self.theta[..., None])[..., 0] + beta * width_z + 2 * math.sqrt(C) * beta * width_x
            v_bar = v_now + beta * width_x
        return self.choose(v_bar, np.exp(u_bar)), prices

    def update(self, offered, prices, choice):
        """One online-Newton step per market (:meth:`~.estimation.OnlineMNLEstimator.update`)."""
        d = self.d
        Z = self.features(prices)
        u = np.where(offered, (Z @ self.theta[..., None])[..., 0], -np.inf)
        top = np.maximum(u.max(axis=1), 0.0)
        e = np.exp(u - top[:, None])
        q = e / (np.exp(-top) + e.sum(axis=1))[:, None]
        mean = (q[:, None, :] @ Z)[:, 0, :]
        H = (Z * q[..., None]).transpose(0, 2, 1) @ Z - mean[:, :, None] * mean[:, None, :]
        y = np.zeros_like(q)
        bought = choice >= 0
        y[np.flatnonzero(bought), choice[bought]] = 1.0
        g = ((q - y)[:, None, :] @ Z)[:, 0, :]
        theta = self.theta - self.eta * np.linalg.solve(self.V + self.eta * H, g[..., None])[..., 0]
        for block in (slice(0, d), slice(d, 2 * d)):
            norm = np.linalg.norm(theta[:, block], axis=1)
            big = norm > 1.0
            theta[big, block] /= norm[big, None]
        self.theta = theta
        self.V = self.V + H


class _BatchETC(_Batch):
    """The explore-then-commit baselines: :class:`~.policies.ExploreThenCommit` (the paper's) and
    :class:`~.policies.ExploreThenCommitLCB`. Exploration draws per market in the one-market order; at the
    commitment each market fits its estimate with the one-market code (one fit per market and run)."""

    def __init__(self, X, W, K, T, rngs, kind, beta=1.0, assortment="exact"):
        super().__init__(X, W, K, T, rngs, assortment)
        make = (lambda: ExploreThenCommitLCB(beta=beta, assortment=assortment)) if kind == "lcb" else \
            (lambda: ExploreThenCommit(assortment=assortment))
        self.single = []
        for b in range(self.B):                                 # one-market policies hold the fitting code
            p = make()
            p.reset(X[b], W[b], K, T, rngs[b])
            self.single.append(p)
        self.n_explore = self.single[0].n_explore
        self.plan = None

    @property
    def committed(self) -> bool:
        """True once every market plays its fixed plan: later rounds repeat the same expected regret."""
        return self.plan is not None

    def act(self, t):
        if t < self.n_explore or self.plan is None:
            acts = [p.act(t) for p in self.single]
            offered, prices = np.array([a[0] for a in acts]), np.array([a[1] for a in acts])
            if t >= self.n_explore:
                self.plan = (offered, prices)
            return offered, prices
        return self.plan

    def update(self, offered, prices, choice):
        if self.plan is None:                                   # after the commitment nothing is learned
            for b, p in enumerate(self.single):
                p.update(offered[b], prices[b], int(choice[b]))


def _make_batch(name, X, W, K, T, rngs, beta, assortment):
    if name == "UCBA-LCBP":
        return _BatchLCB(X, W, K, T, rngs, "ucb", beta, assortment=assortment)
    if name == "TSA-LCBP":
        return _BatchLCB(X, W, K, T, rngs, "ts", beta, assortment=assortment)
    if name == "UCB-price heuristic":
        return _BatchLCB(X, W, K, T, rngs, "heuristic", beta, assortment=assortment)
    if name == "ETC":
        return _BatchETC(X, W, K, T, rngs, "plain", beta, assortment)
    if name == "ETC-LCB":
        return _BatchETC(X, W, K, T, rngs, "lcb", beta, assortment)
    raise ValueError(f"name must be one of {BATCHED_POLICIES}, got {name!r}")


def batched_regret_curves(name: str, N: int, d: int, K: int, T: int, seeds, beta: float = 1.0,
                          assortment: str = "exact") -> dict:
    r""":func:`~companion_lib.cmnl_pricing.experiment.regret_curves` for a policy of :data:`BATCHED_POLICIES`,
    all markets at once: the market of seed ``s`` is ``make_environment(N, d, K, default_rng(s))`` and the
    policy and buyers draw from ``default_rng(s + 1000)``, as there. Returns ``cumulative`` and
    ``censored`` ``(len(seeds), T)`` and ``revenue_star`` ``(len(seeds),)``."""
    if name not in BATCHED_POLICIES:
        raise ValueError(f"name must be one of {BATCHED_POLICIES}, got {name!r}")
    T = _positive_int(T, "T")
    _check_common(beta, 1.0, assortment)
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds must be a non-empty list of ints")
    envs = [make_environment(N, d, K, np.random.default_rng(s)) for s in seeds]
    rngs = [np.random.default_rng(s + 1000) for s in seeds]
    X, W = np.array([e.X for e in envs]), np.array([e.W for e in envs])
    v, alpha = np.array([e.v for e in envs]), np.array([e.alpha for e in envs])
    R_star = np.array([e.optimum()[2] for e in envs])
    policy = _make_batch(name, X, W, K, T, rngs, beta, assortment)
    B = len(seeds)
    regret, censored = np.empty((B, T)), np.empty((B, T))
    for t in range(T):
        if getattr(policy, "committed", False):                  # explore-then-commit after its commitment:
            regret[:, t:] = regret[:, t - 1:t]                   # the same offer, the same expected regret,
            censored[:, t:] = censored[:, t - 1:t]               # and nothing left to learn or to draw
            break
        offered, prices = policy.act(t)
        kept = offered & (prices <= v)                              # eq. (2): the censored assortment
        weights = np.where(kept, np.exp(v - alpha * prices), 0.0)
        q = weights / (1.0 + weights.sum(axis=1, keepdims=True))
        regret[:, t] = R_star - (q * prices).sum(axis=1)
        censored[:, t] = ((prices > v) & offered).sum(axis=1) / offered.sum(axis=1)
        u = np.array([rng.random() for rng in rngs])              # each buyer draws from its market's generator
        choice = (np.cumsum(q, axis=1) <= u[:, None]).sum(axis=1)   # = searchsorted(cumsum, u, side="right")
        choice = np.where(choice < N, choice, -1)
        policy.update(offered, prices, choice)
    return {"cumulative": np.cumsum(regret, axis=1), "censored": censored, "revenue_star": R_star}
