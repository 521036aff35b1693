r"""The book's runs: one simulation of a policy, the policies by name, regret curves over seeds (with the
many-market engine of :mod:`~companion_lib.cmnl_pricing.batch` where a policy has one) and their
statistics (growth ratio, log-log slope per market and of the mean curve), and the time per round."""

from __future__ import annotations

import numpy as np

from .batch import BATCHED_POLICIES, batched_regret_curves
from .model import CensoredMNLEnv, _censored_probs, _positive_int, make_environment
from .policies import (CensoringUnawarePricing, ExploreThenCommit, ExploreThenCommitLCB, Policy, TSLCBPolicy,
                       UCBLCBPolicy, _check_common)

__all__ = [
    "POLICY_NAMES", "make_policy", "simulate", "regret_curves", "growth_ratio", "loglog_slope", "curve_statistics",
    "market_slopes", "seconds_per_round",
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


POLICY_NAMES = ("UCBA-LCBP", "TSA-LCBP", "ETC", "ETC-LCB", "censoring-unaware", "UCB-price heuristic")


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
    if name == "ETC-LCB":
        return ExploreThenCommitLCB(beta=beta, assortment=assortment)
    if name == "censoring-unaware":
        return CensoringUnawarePricing(beta=beta)
    if name == "UCB-price heuristic":
        policy = UCBLCBPolicy(beta=beta, pricing="ucb", assortment=assortment)
        policy.name = name
        return policy
    raise ValueError(f"name must be one of {POLICY_NAMES}, got {name!r}")


def regret_curves(policy, N: int, d: int, K: int, T: int, seeds, beta: float = 1.0, batched: bool = True) -> dict:
    """Cumulative regret ``(len(seeds), T)`` of a policy on one fresh market per seed.

    ``policy`` is a name for :func:`make_policy` (with ``beta``) or a zero-argument factory. The market
    of seed ``s`` is ``make_environment(N, d, K, default_rng(s))``, the same for every policy; the
    policy's randomness uses ``default_rng(s + 1000)``. A named policy with a many-market
    implementation (:data:`~companion_lib.cmnl_pricing.batch.BATCHED_POLICIES`) runs all markets at once
    (``batched=False``: one market after the other with :func:`simulate`; the tests check that both
    give the same curves).
    """
    if isinstance(policy, str) and batched and policy in BATCHED_POLICIES:
        return batched_regret_curves(policy, N, d, K, T, seeds, beta)
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


def market_slopes(cumulative, start: float = 0.25) -> np.ndarray:
    r""":func:`loglog_slope` of each market's curve (each row of ``cumulative``, ``(seeds, T)``): the
    per-replicate statistic of the sublinear-regret claims (0.5 for :math:`\sqrt T`, 1 for linear growth)."""
    c = np.atleast_2d(np.asarray(cumulative, dtype=float))
    return np.array([loglog_slope(row, start) for row in c])


def curve_statistics(cumulative) -> dict:
    r"""Shape and level of a set of cumulative-regret curves ``(seeds, T)``.

    Returns ``reg_T`` (per-seed :math:`\mathrm{Reg}(T)`), ``mean_T`` (their mean), ``ratio``
    (:func:`growth_ratio` of the mean curve), ``slope`` (:func:`loglog_slope` of the mean curve) and
    ``slopes`` (:func:`market_slopes`, one per seed).
    """
    c = np.atleast_2d(np.asarray(cumulative, dtype=float))
    mean = c.mean(axis=0)
    return {"reg_T": c[:, -1].copy(), "mean_T": float(c[:, -1].mean()),
            "ratio": float(growth_ratio(mean)[0]), "slope": loglog_slope(mean), "slopes": market_slopes(c)}


def seconds_per_round(name: str, N: int, d: int, K: int, rounds: int = 100, beta: float = 1.0,
                      assortment: str = "exact", seed: int = 0, markets: int = 1) -> float:
    """CPU seconds per round of policy ``name`` on ``markets`` markets (policy step plus simulator),
    measured on a short run.

    Runs ``rounds // 5`` and ``rounds`` rounds and divides the difference of their CPU times by the
    difference of their lengths, so the one-off costs of a run (building the assortment table, the
    oracle) cancel. A policy with a many-market implementation advances all ``markets`` together (the
    engine of :func:`regret_curves`); the others run one market after the other. For the
    explore-then-commit baselines the short run is mostly exploration, so the figure overstates their
    cost over a long horizon. Used to estimate the cost of the paper's full scale.
    """
    import time

    rounds = _positive_int(rounds, "rounds")
    markets = _positive_int(markets, "markets")
    if rounds < 10:
        raise ValueError(f"rounds must be >= 10, got {rounds}")
    seeds = list(range(seed, seed + markets))
    if name in BATCHED_POLICIES:
        make_environment(N, d, K, np.random.default_rng(seed))          # checks the sizes
        cpu = []
        for length in (rounds // 5, rounds):
            start = time.process_time()
            batched_regret_curves(name, N, d, K, length, seeds, beta, assortment)
            cpu.append(time.process_time() - start)
        return max(cpu[1] - cpu[0], 0.0) / (rounds - rounds // 5)
    envs = [make_environment(N, d, K, np.random.default_rng(s)) for s in seeds]
    for env in envs:
        env.optimum()                                # computed once per market (cached), not per round
    cpu = []
    for length in (rounds // 5, rounds):
        start = time.process_time()
        for s, env in zip(seeds, envs):
            simulate(env, make_policy(name, beta, assortment), length, np.random.default_rng(s + 1000))
        cpu.append(time.process_time() - start)
    return max(cpu[1] - cpu[0], 0.0) / (rounds - rounds // 5)
