r"""The C-MNL model, eqs. (1)-(5): censored choice probabilities, expected revenue and its price gradient,
assortments and the oracle, the environment, and the input checks the other files share."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from itertools import combinations

import numpy as np

from ..common.validation import check_finite_vector, check_positive_int

__all__ = [
    "CensoredMNLEnv", "make_environment", "censored_choice_probabilities", "expected_revenue", "revenue_price_gradient",
    "all_assortments", "best_assortment", "topk_assortment", "oracle", "kappa",
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
    return _assortment_table(N, K).copy()


@lru_cache(maxsize=16)
def _assortment_table(N: int, K: int) -> np.ndarray:
    """The table of :func:`all_assortments`, built once per ``(N, K)`` (every market and policy of a run
    needs it; at ``N = 20`` it has over twenty thousand rows)."""
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


def _first_best(value) -> np.ndarray:
    """Index of the best assortment along the last axis: the first whose value is within a relative
    ``1e-12`` of the maximum. Revenue ties are common (at the first round all estimates are equal) and
    rounding would otherwise break them differently in one-market and many-market code."""
    best = value.max(axis=-1, keepdims=True)
    return np.argmax(value >= best - 1e-12 * np.maximum(np.abs(best), 1.0), axis=-1)


def _best(r, w, masks, mf):
    """:func:`best_assortment` without input checks; ``mf`` is ``masks`` as floats."""
    value = (mf @ (r * w)) / (1.0 + mf @ w)
    return masks[int(_first_best(value))].copy()


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
