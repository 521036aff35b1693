r"""The hidden cost of waiting for accurate predictions, in miniature.

Paper: Ali Shirali, Ariel D. Procaccia and Rediet Abebe, *The Hidden Cost of Waiting for Accurate
Predictions*, ICLR 2025 (arXiv:2503.00650, OpenReview ``A3YUPeJTNR``). No official code exists.

What follows the paper (its public abstract, TL;DR and reviews):

* individual :math:`i` has a latent failure probability :math:`p_i \sim \mathcal D`;
* each period it emits a binary observation :math:`o_i^t \sim \mathrm{Ber}(\tilde p_i)` with
  :math:`\tilde p_i = h(p_i)` increasing in :math:`p_i`, and it may fail (leave for good);
* the planner ranks the still-active individuals by the count :math:`y_i^t = \sum_{s \le t} o_i^s`
  (Bayes-optimal) and suffers the ranking risk :math:`R^t`;
* a budget of :math:`B` treatments is allocated once (one-time) or spread over epochs (over-time).

What is this book's reconstruction (the paper body could not be read; conventions are ours):

* the event order inside a period (observe, then fail with probability :math:`p_i`);
* the ranking risk as the pairwise mis-ordering probability among active individuals, ties ½::

      R^t = P(y_i^t < y_j^t | p_i > p_j) + 1/2 P(y_i^t = y_j^t | p_i > p_j),  p_i, p_j ~ f_t iid,
      f_t(p) ∝ f_D(p) (1 - p)^t  (the active population at epoch t);

* the utility of a fully effective treatment at epoch :math:`t`: :math:`u_t(p) = 1 - (1-p)^{T-t}`
  (the failure it prevents over the rest of the horizon);
* a mean-field (large :math:`N`) evaluation on a quadrature grid and a brute-force search over
  budget splits as a stand-in for the paper's Algorithm 1 (exponential in :math:`T`, independent of
  :math:`N`).

Everything is exact quadrature over a grid of :math:`p` values (``Population``) except the
``simulate_panel``/``mc_*`` functions, which simulate a finite population for cross-checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Callable

import numpy as np
from scipy import special, stats

from .common.validation import check_int

__all__ = [
    "Population", "beta_population", "two_group_population", "linear_signal",
    "active_weights", "observation_pmf", "ranking_risk", "ranking_risk_curve",
    "posterior_mean", "posterior_mse", "allocation_welfare", "one_time_welfare",
    "optimal_one_time", "budget_compositions", "optimal_over_time", "mean_allocation_epoch",
    "simulate_panel", "mc_ranking_risk", "mc_posterior_mse", "mc_one_time_welfare",
]

Signal = Callable[[np.ndarray], np.ndarray]
RULES = ("prediction", "random", "oracle")


# -- validation helpers ------------------------------------------------------------------------------
def _int(value: object, name: str, low: int = 0) -> int:
    return check_int(value, name, low=low)  # shared with the other chapters (companion_lib.common.validation)


def _real(value: object, name: str, low: float, high: float, open_low: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    v = float(value)
    if not np.isfinite(v) or v > high or v < low or (open_low and v == low):
        bracket = "(" if open_low else "["
        raise ValueError(f"{name} must be in {bracket}{low}, {high}], got {value}")
    return v


# -- population and signal ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Population:
    r"""A population law :math:`\mathcal D` of failure probabilities, as quadrature nodes and weights.

    Attributes
    ----------
    p: increasing nodes in [0, 1].
    w: non-negative weights summing to one (the mass of each node, or of each grid bin).
    continuous: True when the nodes discretise a continuous law; two individuals in the same bin then
        count as a pair with (practically) equal risk. False for a genuinely discrete law, whose
        equal-risk pairs are left out of the ranking risk (they cannot be mis-ordered).
    beta_params: the (a, b) of a Beta law, used for exact sampling; None for discrete laws.
    """

    p: np.ndarray
    w: np.ndarray
    continuous: bool
    beta_params: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        p = np.asarray(self.p, dtype=float)
        w = np.asarray(self.w, dtype=float)
        if p.ndim != 1 or p.shape != w.shape or p.size == 0:
            raise ValueError(f"p and w must be 1-D arrays of one length, got {p.shape} and {w.shape}")
        if not (np.all(np.isfinite(p)) and np.all((p >= 0) & (p <= 1))):
            raise ValueError("p must lie in [0, 1]")
        if np.any(np.diff(p) <= 0):
            raise ValueError("p must be strictly increasing")
        if not np.all(np.isfinite(w)) or np.any(w < 0) or not np.isclose(w.sum(), 1.0, atol=1e-9):
            raise ValueError(f"w must be non-negative and sum to 1, got sum {w.sum()}")
        object.__setattr__(self, "p", p)
        object.__setattr__(self, "w", w / w.sum())

    @property
    def mean(self) -> float:
        return float(self.w @ self.p)

    @property
    def sd(self) -> float:
        r"""The standard deviation of :math:`p` (the book's inequality measure)."""
        if self.beta_params is not None:
            a, b = self.beta_params
            return float(np.sqrt(a * b / ((a + b) ** 2 * (a + b + 1))))
        return float(np.sqrt(self.w @ (self.p - self.mean) ** 2))

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Draw ``n`` failure probabilities (exactly from the Beta law when there is one)."""
        n = _int(n, "n", 1)
        if self.beta_params is not None:
            return rng.beta(*self.beta_params, size=n)
        return rng.choice(self.p, size=n, p=self.w)


def beta_population(mean: float, kappa: float, n_grid: int = 400) -> Population:
    r"""The Beta law :math:`\mathrm{Beta}(\mu\kappa, (1-\mu)\kappa)` on a logit-spaced grid.

    Small ``kappa`` means high inequality: :math:`\mathrm{sd}(p) = \sqrt{\mu(1-\mu)/(\kappa+1)}`.
    Bins are equally spaced in :math:`\log(p/(1-p))` (fine near 0 and 1, where Beta densities with
    small parameters pile up); each node is the conditional mean of its bin, each weight the bin's
    probability (a CDF difference), so the mean of :math:`p` is exact.
    """
    mu = _real(mean, "mean", 0.0, 1.0, open_low=True)
    if mu >= 1.0:
        raise ValueError(f"mean must be in (0, 1), got {mean}")
    kappa = _real(kappa, "kappa", 0.0, np.inf, open_low=True)
    n_grid = _int(n_grid, "n_grid", 2)
    a, b = mu * kappa, (1 - mu) * kappa
    edges = np.concatenate([[0.0], special.expit(np.linspace(-16, 16, n_grid - 1)), [1.0]])
    w = np.diff(stats.beta.cdf(edges, a, b))
    first = np.diff(stats.beta.cdf(edges, a + 1, b)) * mu  # E[p; bin]
    keep = w > 1e-300
    p = np.where(keep, first / np.where(keep, w, 1.0), 0.5 * (edges[:-1] + edges[1:]))
    p = np.clip(p, edges[:-1], edges[1:])
    # keep strictly increasing nodes (rounding can tie two tiny bins): merge ties
    p, inverse = np.unique(p, return_inverse=True)
    w = np.bincount(inverse, weights=w, minlength=p.size)
    return Population(p=p, w=w / w.sum(), continuous=True, beta_params=(a, b))


def two_group_population(share_high: float, p_low: float, p_high: float) -> Population:
    """A discrete two-group law: a share ``share_high`` of individuals at risk ``p_high``, the rest
    at ``p_low`` (a simple model of a divided population)."""
    s = _real(share_high, "share_high", 0.0, 1.0, open_low=True)
    if s >= 1.0:
        raise ValueError(f"share_high must be in (0, 1), got {share_high}")
    lo = _real(p_low, "p_low", 0.0, 1.0)
    hi = _real(p_high, "p_high", 0.0, 1.0)
    if not lo < hi:
        raise ValueError(f"p_low must be below p_high, got {p_low} and {p_high}")
    return Population(p=np.array([lo, hi]), w=np.array([1 - s, s]), continuous=False)


def linear_signal(intercept: float, slope: float) -> Signal:
    r"""The observation probability :math:`\tilde p = h(p) = \min(1, \max(0, c + s p))`.

    ``slope > 0`` makes :math:`h` increasing, as the paper assumes.
    """
    c = _real(intercept, "intercept", 0.0, 1.0)
    s = _real(slope, "slope", 0.0, np.inf, open_low=True)

    def h(p: np.ndarray) -> np.ndarray:
        return np.clip(c + s * np.asarray(p, dtype=float), 0.0, 1.0)

    h.__name__ = f"h(p)=min(1,{c:g}+{s:g}p)"
    return h


def _signal_on(pop: Population, h: Signal) -> np.ndarray:
    if not callable(h):
        raise TypeError(f"h must be a callable p -> h(p), got {type(h).__name__}")
    hp = np.asarray(h(pop.p), dtype=float)
    if hp.shape != pop.p.shape or not np.all(np.isfinite(hp)) or np.any((hp < 0) | (hp > 1)):
        raise ValueError("h(p) must return probabilities in [0, 1], one per node")
    if np.any(np.diff(hp) < -1e-12):
        raise ValueError("h must be non-decreasing in p (the paper's monotone signal)")
    return hp


def _check_pop(pop: Population) -> Population:
    if not isinstance(pop, Population):
        raise TypeError(f"pop must be a Population, got {type(pop).__name__}")
    return pop


# -- ranking among the active ------------------------------------------------------------------------
def active_weights(pop: Population, t: int) -> tuple[np.ndarray, float]:
    r"""The law of :math:`p` among those still active at epoch ``t``, :math:`f_t \propto f_{\mathcal D}(p)(1-p)^t`.

    Returns the normalised weights and the active share :math:`\mathbb E[(1-p)^t]`.
    """
    pop = _check_pop(pop)
    t = _int(t, "t")
    m = pop.w * (1.0 - pop.p) ** t
    total = float(m.sum())
    if total <= 0:
        raise ValueError(f"nobody is active at epoch t={t}")
    return m / total, total


def observation_pmf(pop: Population, h: Signal, t: int) -> np.ndarray:
    r"""The matrix :math:`B_{a,k} = \binom{t}{k} h(p_a)^k (1-h(p_a))^{t-k}`: the law of :math:`y^t` at node ``a``."""
    pop = _check_pop(pop)
    t = _int(t, "t")
    hp = _signal_on(pop, h)
    return stats.binom.pmf(np.arange(t + 1)[None, :], t, hp[:, None])


def ranking_risk(pop: Population, h: Signal, t: int, population_epoch: int | None = None) -> float:
    r"""The ranking risk :math:`R^t` of ranking active individuals by :math:`y^t` (exact quadrature).

    :math:`R = \sum_{a>b} w_a w_b M_{ab} / \sum_{a>b} w_a w_b` with
    :math:`M_{ab} = P(y_a < y_b) + \tfrac12 P(y_a = y_b)`, the weights :math:`w` those of
    :math:`f_s` (``s = population_epoch``, default ``t``). For a continuous law, pairs inside one grid
    bin count with loss ½. Setting ``population_epoch`` apart from ``t`` separates the two effects:
    ``s = 0`` keeps the initial population (information effect only); a fixed ``t`` with varying
    ``s`` changes only the population.
    """
    pop = _check_pop(pop)
    t = _int(t, "t")
    s = t if population_epoch is None else _int(population_epoch, "population_epoch")
    w, _ = active_weights(pop, s)
    B = observation_pmf(pop, h, t)
    below = np.cumsum(B, axis=1) - B  # P(y_a < k)
    M = (below + 0.5 * B) @ B.T  # M[a, b] = P(y_a < y_b) + 1/2 P(y_a = y_b)
    num = float(w @ np.tril(M, k=-1) @ w)  # pairs a > b, i.e. p_a > p_b
    den = float((w.sum() ** 2 - np.sum(w**2)) / 2)
    if pop.continuous:
        diag = float(np.sum(w**2))
        num += 0.25 * diag
        den += 0.5 * diag
    if den <= 0:
        raise ValueError("the population has no pair with distinct risks")
    return num / den


def ranking_risk_curve(pop: Population, h: Signal, T: int) -> np.ndarray:
    r""":math:`R^t` for ``t = 0..T`` (``R^0 = 1/2``: with no observation every pair is a tie)."""
    T = _int(T, "T")
    return np.array([ranking_risk(pop, h, t) for t in range(T + 1)])


# -- individual accuracy -----------------------------------------------------------------------------
def posterior_mean(pop: Population, h: Signal, t: int) -> np.ndarray:
    r"""The Bayes prediction :math:`\mathbb E[p \mid y^t = k, \text{active at } t]` for ``k = 0..t``.

    The posterior is :math:`\pi(p \mid y, t) \propto f_{\mathcal D}(p)(1-p)^t h(p)^y (1-h(p))^{t-y}`.
    Entries for counts that cannot occur are NaN.
    """
    w, _ = active_weights(pop, t)
    B = observation_pmf(pop, h, t)
    mass = w @ B
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(mass > 0, (w * pop.p) @ B / mass, np.nan)


def posterior_mse(pop: Population, h: Signal, t: int) -> float:
    r"""The individual prediction error :math:`\mathbb E[(\mathbb E[p\mid y^t] - p)^2]` among the active at ``t``."""
    w, _ = active_weights(pop, t)
    B = observation_pmf(pop, h, t)
    m = np.nan_to_num(posterior_mean(pop, h, t))
    return float(np.sum(w[:, None] * B * (m[None, :] - pop.p[:, None]) ** 2))


# -- welfare (mean-field: N -> infinity, budget a fraction beta of N) ---------------------------------
def allocation_welfare(pop: Population, h: Signal, T: int, beta: float, allocations: np.ndarray,
                       rule: str = "prediction") -> np.ndarray:
    r"""Welfare per treatment of budget splits, evaluated exactly in the large-population limit.

    ``allocations`` is a ``(K, T)`` array (or one row) of budget fractions per epoch ``t = 0..T-1``,
    rows summing to one. At epoch ``t`` the planner treats a mass ``beta * allocations[k, t]`` of
    untreated active individuals chosen by ``rule``: ``"prediction"`` (largest :math:`y^t` first,
    ties at random), ``"oracle"`` (largest :math:`p` first) or ``"random"``. A treated individual
    yields :math:`u_t(p) = 1 - (1-p)^{T-t}`. Between epochs, survivors emit an observation with
    probability :math:`h(p)` and fail with probability :math:`p`. Returns :math:`U/B` per row: the
    expected failures prevented per treatment.
    """
    pop = _check_pop(pop)
    T = _int(T, "T", 1)
    beta = _real(beta, "beta", 0.0, 1.0, open_low=True)
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    A = np.atleast_2d(np.asarray(allocations, dtype=float))
    if A.ndim != 2 or A.shape[1] != T:
        raise ValueError(f"allocations must have shape (K, T={T}), got {A.shape}")
    if not np.all(np.isfinite(A)) or np.any(A < 0) or not np.allclose(A.sum(axis=1), 1.0):
        raise ValueError("allocations must be non-negative fractions summing to 1 per row")
    hp = _signal_on(pop, h)
    p = pop.p
    K, n = A.shape[0], p.size
    S = np.zeros((K, n, T + 1))  # untreated active mass over (node, y)
    S[:, :, 0] = pop.w
    total = np.zeros(K)
    for t in range(T):
        b = beta * A[:, t]
        u = 1.0 - (1.0 - p) ** (T - t)
        if rule == "prediction":
            level = S.sum(axis=1)  # (K, y)
            above = np.cumsum(level[:, ::-1], axis=1)[:, ::-1] - level
            safe = np.where(level > 0, level, 1.0)
            frac = np.where(level > 0, np.clip((b[:, None] - above) / safe, 0.0, 1.0), 0.0)
            sel = S * frac[:, None, :]
        elif rule == "oracle":
            node = S.sum(axis=2)  # (K, node)
            above = np.cumsum(node[:, ::-1], axis=1)[:, ::-1] - node
            safe = np.where(node > 0, node, 1.0)
            frac = np.where(node > 0, np.clip((b[:, None] - above) / safe, 0.0, 1.0), 0.0)
            sel = S * frac[:, :, None]
        else:
            mass = S.sum(axis=(1, 2))
            frac = np.where(mass > 0, np.minimum(1.0, b / np.where(mass > 0, mass, 1.0)), 0.0)
            sel = S * frac[:, None, None]
        total += np.einsum("kay,a->k", sel, u)
        S = (S - sel) * (1.0 - p)[None, :, None]  # failures of period t+1
        moved = S * hp[None, :, None]
        S = S - moved
        S[:, :, 1:] += moved[:, :, :-1]  # observations of period t+1
    return total / beta


def one_time_welfare(pop: Population, h: Signal, T: int, beta: float, rule: str = "prediction") -> np.ndarray:
    r"""One-time allocation: :math:`U(t)/B` for spending the whole budget at epoch ``t = 0..T-1``."""
    T = _int(T, "T", 1)
    return allocation_welfare(pop, h, T, beta, np.eye(T), rule=rule)


def optimal_one_time(pop: Population, h: Signal, T: int, beta: float) -> tuple[int, np.ndarray]:
    r"""The best single epoch :math:`t^\star = \arg\max_t U(t)` (earliest on ties) and :math:`U(\cdot)/B`."""
    U = one_time_welfare(pop, h, T, beta)
    return int(np.argmax(U >= U.max() - 1e-12)), U


def budget_compositions(T: int, units: int) -> np.ndarray:
    """All ways to split ``units`` equal budget units over ``T`` epochs: a ``(C(T+units-1, units), T)``
    integer array (stars and bars)."""
    T = _int(T, "T", 1)
    units = _int(units, "units", 1)
    combos = list(combinations(range(units + T - 1), T - 1))
    bars = np.array(combos, dtype=int).reshape(len(combos), T - 1)
    edges = np.concatenate([np.full((bars.shape[0], 1), -1), bars,
                            np.full((bars.shape[0], 1), units + T - 1)], axis=1)
    return np.diff(edges, axis=1) - 1


def optimal_over_time(pop: Population, h: Signal, T: int, beta: float, units: int = 10
                      ) -> tuple[np.ndarray, float, np.ndarray, np.ndarray]:
    r"""The best over-time split of the budget, by exhaustive search over budget units.

    A hands-on stand-in for the paper's Algorithm 1: the cost grows as :math:`\binom{T+u-1}{u}`
    (exponential in ``T``) and does not depend on the number of individuals. Returns the best
    fractions per epoch, its :math:`U/B`, and every candidate split with its welfare.
    """
    splits = budget_compositions(T, units) / units
    chunk = 4096  # bounds memory: the state array holds chunk x grid x (T+1) numbers
    U = np.concatenate([allocation_welfare(pop, h, T, beta, splits[i:i + chunk])
                        for i in range(0, len(splits), chunk)])
    k = int(np.argmax(U))
    return splits[k], float(U[k]), splits, U


def mean_allocation_epoch(fractions: np.ndarray) -> float:
    r"""The budget-weighted mean epoch :math:`\sum_t t\,b_t/B` of a split (a summary of its timing)."""
    f = np.asarray(fractions, dtype=float)
    if f.ndim != 1 or f.size == 0 or np.any(f < 0) or not np.isclose(f.sum(), 1.0):
        raise ValueError("fractions must be a 1-D array of non-negative numbers summing to 1")
    return float(np.arange(f.size) @ f)


# -- finite-N Monte Carlo (cross-checks) -------------------------------------------------------------
def simulate_panel(pop: Population, h: Signal, T: int, n: int, rng: np.random.Generator
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Simulate ``n`` individuals for ``T`` periods (observe, then fail).

    Returns ``p`` (n,), counts ``y`` (n, T+1) with ``y[:, t]`` the sum of the first ``t``
    observations, and ``active`` (n, T+1), True while the individual has survived ``t`` periods.
    """
    pop = _check_pop(pop)
    T = _int(T, "T")
    n = _int(n, "n", 2)
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy Generator, got {type(rng).__name__}")
    p = pop.sample(n, rng)
    hp = np.asarray(h(p), dtype=float)
    obs = rng.random((n, T)) < hp[:, None]
    fail = rng.random((n, T)) < p[:, None]
    y = np.zeros((n, T + 1), dtype=np.int32)
    y[:, 1:] = np.cumsum(obs, axis=1)
    active = np.ones((n, T + 1), dtype=bool)
    active[:, 1:] = np.cumprod(~fail, axis=1).astype(bool)
    return p, y, active


def mc_ranking_risk(p: np.ndarray, y: np.ndarray, active: np.ndarray) -> float:
    """Ranking risk of a simulated cohort at one epoch, over *all* pairs of active individuals.

    Every pair with distinct risks counts: loss 1 if the riskier one has fewer observations, ½ on a
    tie. Sorting by ``p`` and keeping running counts per observation level makes this an exact
    U-statistic in O(n·(t+1)) instead of a sample of pairs, so its only noise is the finite cohort.
    """
    p, y, active = np.asarray(p, dtype=float), np.asarray(y), np.asarray(active, dtype=bool)
    if not (p.shape == y.shape == active.shape) or p.ndim != 1:
        raise ValueError("p, y and active must be 1-D arrays of one length (one epoch)")
    if active.sum() < 2:
        raise ValueError("fewer than two active individuals")
    order = np.argsort(p[active], kind="stable")
    ps, ys = p[active][order], y[active][order].astype(np.int64)
    levels = int(ys.max()) + 1
    counts = np.zeros((ps.size + 1, levels), dtype=np.int64)  # counts[k, l]: among the first k, y = l
    np.add.at(counts, (np.arange(1, ps.size + 1), ys), 1)
    counts = np.cumsum(counts, axis=0)
    group_start = np.searchsorted(ps, ps, side="left")  # individuals with strictly smaller p
    below = counts[group_start]  # (n, levels)
    higher = below[:, ::-1].cumsum(axis=1)[:, ::-1]  # sum over levels >= l
    idx = np.arange(ps.size)
    tie = below[idx, ys]
    strictly_higher = higher[idx, ys] - tie
    pairs = group_start.sum()
    if pairs == 0:
        raise ValueError("no pair of active individuals with distinct risks")
    return float((strictly_higher + 0.5 * tie).sum() / pairs)


def mc_posterior_mse(pop: Population, h: Signal, p: np.ndarray, y: np.ndarray, active: np.ndarray,
                     t: int) -> float:
    """Monte Carlo prediction error of the exact posterior mean on a simulated panel at epoch ``t``."""
    m = posterior_mean(pop, h, t)
    a = np.asarray(active)[:, t]
    return float(np.mean((m[np.asarray(y)[a, t]] - np.asarray(p)[a]) ** 2))


def mc_one_time_welfare(p: np.ndarray, y: np.ndarray, active: np.ndarray, T: int, beta: float,
                        rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    r"""Finite-population one-time welfare per treatment, :math:`U(t)/B` and :math:`U_{\rm rand}(t)/B`.

    At each epoch ``t < T`` the ``B = round(beta * n)`` active individuals with the largest counts are
    treated (random tie-breaking); the random baseline is its expectation. Utilities are the
    expected prevented failures :math:`u_t(p)` (a Rao-Blackwellised estimate).
    """
    T = _int(T, "T", 1)
    beta = _real(beta, "beta", 0.0, 1.0, open_low=True)
    p, y, active = np.asarray(p), np.asarray(y), np.asarray(active, dtype=bool)
    n = p.size
    budget = max(1, int(round(beta * n)))
    U = np.zeros(T)
    R = np.zeros(T)
    for t in range(T):
        idx = np.flatnonzero(active[:, t])
        u = 1.0 - (1.0 - p[idx]) ** (T - t)
        order = np.lexsort((rng.random(idx.size), -y[idx, t]))
        U[t] = u[order[:budget]].sum() / budget
        R[t] = u.mean() * min(budget, idx.size) / budget
    return U, R
