r"""The book's runs: one simulation of a policy, the policies by name, regret curves over seeds and
their statistics (growth ratio, log-log slope, the paired upper bound), and the time per round."""

from __future__ import annotations

import math

import numpy as np

from .model import CensoredMNLEnv, _censored_probs, _positive_int, make_environment
from .policies import CensoringUnawarePricing, ExploreThenCommit, Policy, TSLCBPolicy, UCBLCBPolicy, _check_common

__all__ = [
    "POLICY_NAMES", "make_policy", "simulate", "regret_curves", "growth_ratio", "loglog_slope", "curve_statistics",
    "paired_upper_bound", "seconds_per_round",
]


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
