"""Coalitions and attributions: subsets as masks and bit codes, exact Shapley values, KernelSHAP (the
closed form of Covert and Lee, Eq. 5 of the paper), leave-one-out, Banzhaf, and the linear datamodeling
score (Definition 2)."""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import rankdata

__all__ = [
    "all_subsets", "banzhaf", "exact_shapley", "kernel_shap", "lds", "leave_one_out", "sample_shapley_subsets",
    "shapley_kernel_weights", "subset_codes",
]


# ------------------------------------------------------------------------------------------------
# Coalitions
# ------------------------------------------------------------------------------------------------
def all_subsets(n: int) -> np.ndarray:
    """All :math:`2^n` coalitions as a boolean ``(2**n, n)`` array; row ``s`` is the bit code ``s``."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"n must be an int, got {type(n).__name__}")
    if not 1 <= n <= 20:
        raise ValueError(f"n must be in [1, 20], got {n}")
    codes = np.arange(2**n)
    return ((codes[:, None] >> np.arange(n)) & 1).astype(bool)


def subset_codes(masks: np.ndarray) -> np.ndarray:
    """Bit codes :math:`\\sum_{i\\in S}2^i` of boolean coalition masks ``(m, n)``."""
    masks = np.asarray(masks)
    if masks.ndim != 2:
        raise ValueError(f"masks must be 2-D (subsets, players), got shape {masks.shape}")
    return (masks.astype(np.int64) << np.arange(masks.shape[1])).sum(axis=1)


def _check_game(values: np.ndarray) -> tuple[np.ndarray, int]:
    values = np.asarray(values, dtype=float)
    if values.ndim != 1:
        raise ValueError(f"values must be 1-D (one value per bit code), got shape {values.shape}")
    n = int(round(math.log2(values.size))) if values.size > 0 else -1
    if n < 1 or 2**n != values.size:
        raise ValueError(f"values must have length 2**n for some n >= 1, got {values.size}")
    if not np.all(np.isfinite(values)):
        raise ValueError("values must be finite")
    return values, n


# ------------------------------------------------------------------------------------------------
# Attributions: Shapley, KernelSHAP, LOO, Banzhaf, LDS
# ------------------------------------------------------------------------------------------------
def exact_shapley(values: np.ndarray) -> np.ndarray:
    """Shapley values by enumeration:
    :math:`\\phi_i=\\sum_{S\\not\\ni i}\\frac{|S|!(n-|S|-1)!}{n!}[v(S\\cup\\{i\\})-v(S)]`.

    ``values[s]`` is :math:`v(S)` for the coalition with bit code ``s`` (see :func:`all_subsets`).
    """
    values, n = _check_game(values)
    codes = np.arange(values.size)
    size = np.array([bin(c).count("1") for c in codes])
    weight = np.array([math.factorial(k) * math.factorial(n - k - 1) / math.factorial(n) if k < n else 0.0
                       for k in size])
    phi = np.empty(n)
    for i in range(n):
        without = codes[(codes >> i) & 1 == 0]
        phi[i] = np.sum(weight[without] * (values[without | (1 << i)] - values[without]))
    return phi


def leave_one_out(values: np.ndarray) -> np.ndarray:
    """Leave-one-out scores :math:`v([n])-v([n]\\setminus\\{i\\})`."""
    values, n = _check_game(values)
    full = 2**n - 1
    return np.array([values[full] - values[full & ~(1 << i)] for i in range(n)])


def banzhaf(values: np.ndarray) -> np.ndarray:
    """Banzhaf values :math:`\\frac1{2^{n-1}}\\sum_{S\\not\\ni i}[v(S\\cup\\{i\\})-v(S)]`."""
    values, n = _check_game(values)
    codes = np.arange(values.size)
    out = np.empty(n)
    for i in range(n):
        without = codes[(codes >> i) & 1 == 0]
        out[i] = np.mean(values[without | (1 << i)] - values[without])
    return out


def shapley_kernel_weights(n: int) -> np.ndarray:
    """The KernelSHAP distribution over sizes: :math:`p(k)\\propto\\frac{n-1}{k(n-k)}`, ``k = 1..n-1``.

    A coalition of size :math:`k` then has probability :math:`p(k)/\\binom nk` (Eq. 5's weighting).
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"n must be an int, got {type(n).__name__}")
    if n < 2:
        raise ValueError(f"n must be >= 2, got {n}")
    k = np.arange(1, n)
    w = (n - 1) / (k * (n - k))
    return w / w.sum()


def sample_shapley_subsets(n: int, m: int, rng: np.random.Generator | int | None = None,
                           paired: bool = True) -> np.ndarray:
    """Draw ``m`` coalitions from the Shapley kernel: a size ``k`` with :func:`shapley_kernel_weights`,
    then ``k`` players uniformly (the official ``remove_data_by_shapley``). With ``paired=True`` every
    draw :math:`z` is followed by its complement :math:`\\mathbf 1-z` (antithetic sampling).
    """
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)):
        raise TypeError(f"m must be an int, got {type(m).__name__}")
    if m < 1:
        raise ValueError(f"m must be >= 1, got {m}")
    rng = np.random.default_rng(rng)
    p = shapley_kernel_weights(n)
    n_draw = (m + 1) // 2 if paired else m
    sizes = rng.choice(np.arange(1, n), size=n_draw, p=p)
    ranks = np.argsort(np.argsort(rng.random((n_draw, n)), axis=1), axis=1)   # a random order per draw
    z = ranks < sizes[:, None]                                                  # its first k players
    if paired:
        z = np.stack([z, ~z], axis=1).reshape(-1, n)
    return z[:m]


def kernel_shap(z: np.ndarray, v_z: np.ndarray, v_empty: float, v_full: float,
                weights: np.ndarray | None = None) -> np.ndarray:
    """KernelSHAP's closed form (Covert & Lee 2021, eq. 7): solve
    :math:`\\min_\\beta\\sum_m w_m(v(z_m)-v(\\mathbf 0)-z_m^\\top\\beta)^2` s.t.
    :math:`\\mathbf 1^\\top\\beta=v(\\mathbf 1)-v(\\mathbf 0)` with
    :math:`\\hat A=\\sum_m w_mz_mz_m^\\top`, :math:`\\hat b=\\sum_m w_mz_m(v(z_m)-v(\\mathbf 0))` and
    :math:`\\hat\\phi=\\hat A^{-1}(\\hat b-\\mathbf 1\\frac{\\mathbf 1^\\top\\hat A^{-1}\\hat b-v(\\mathbf 1)+v(\\mathbf 0)}
    {\\mathbf 1^\\top\\hat A^{-1}\\mathbf 1})`.

    ``z`` are coalitions sampled from the Shapley kernel (then ``weights=None``: equal weights), or any
    coalitions with their kernel probabilities as ``weights`` (all of them give the exact Shapley values).
    A pseudo-inverse handles a singular :math:`\\hat A` at small ``m``.
    """
    z = np.asarray(z, dtype=float)
    v_z = np.asarray(v_z, dtype=float)
    if z.ndim != 2 or v_z.shape != (z.shape[0],):
        raise ValueError(f"z must be (m, n) and v_z (m,), got {z.shape} and {v_z.shape}")
    if z.shape[0] < 1:
        raise ValueError("z must hold at least one coalition")
    if not (np.all(np.isfinite(v_z)) and np.isfinite(v_empty) and np.isfinite(v_full)):
        raise ValueError("v_z, v_empty and v_full must be finite")
    w = np.ones(z.shape[0]) if weights is None else np.asarray(weights, dtype=float)
    if w.shape != (z.shape[0],) or np.any(w < 0):
        raise ValueError("weights must be (m,) and non-negative")
    w = w / w.sum()
    A = (z * w[:, None]).T @ z
    b = (z * w[:, None]).T @ (v_z - v_empty)
    A_inv = np.linalg.pinv(A)
    ones = np.ones(z.shape[1])
    correction = (ones @ A_inv @ b - (v_full - v_empty)) / (ones @ A_inv @ ones)
    return A_inv @ (b - correction * ones)


def lds(attributions: np.ndarray, test_masks: np.ndarray, test_values: np.ndarray) -> float:
    """Linear datamodeling score (Definition 2): :math:`100\\cdot\\rho_{\\rm Spearman}`
    between the additive predictions :math:`\\sum_{i\\in S_b}\\tau_i` and the true values :math:`v(S_b)`.
    """
    tau = np.asarray(attributions, dtype=float)
    masks = np.asarray(test_masks, dtype=float)
    y = np.asarray(test_values, dtype=float)
    if masks.ndim != 2 or tau.shape != (masks.shape[1],) or y.shape != (masks.shape[0],):
        raise ValueError(f"need attributions (n,), test_masks (B, n), test_values (B,); got "
                         f"{tau.shape}, {masks.shape}, {y.shape}")
    if masks.shape[0] < 3:
        raise ValueError("LDS needs at least 3 test subsets")
    pred = masks @ tau
    if np.ptp(pred) == 0 or np.ptp(y) == 0:
        return 0.0
    # Spearman's rho is Pearson's r of the (average) ranks; computed directly, it is much faster than
    # scipy.stats.spearmanr on these short vectors (a unit test checks that the two agree)
    rp, ry = rankdata(pred), rankdata(y)
    rp, ry = rp - rp.mean(), ry - ry.mean()
    return float(100 * (rp @ ry) / np.sqrt((rp @ rp) * (ry @ ry)))
