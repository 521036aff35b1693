"""Crediting data contributors of diffusion models with Shapley values and sparsified fine-tuning.

Lin, Lu, Kim and Lee, "An Efficient Framework for Crediting Data Contributors of Diffusion Models",
ICLR 2025 (arXiv 2407.03153). Official code: github.com/suinleelab/Group-Attribution-for-Diffusion-Models.

The paper's objects, in its symbols, and where they live here:

* Contributors :math:`\\mathcal D=\\bigcup_{i=1}^n\\mathcal D_i`; a coalition :math:`S\\subseteq[n]` is a boolean
  mask (or its bit code :math:`\\sum_{i\\in S}2^i`): :func:`make_contributors`, :func:`all_subsets`.
* A diffusion model :math:`\\theta` (DDPM, epsilon-prediction, ancestral sampling): many small MLP denoisers
  trained in parallel as one batched network: :func:`init_denoisers`, :func:`train_denoisers`,
  :func:`sample_denoisers`, :func:`linear_beta_schedule`.
* A global property :math:`\\mathcal F(\\theta)` of the generated distribution (Definition 1):
  :func:`inception_score_analogue`, :func:`diversity_entropy`, :func:`precision`, :func:`global_properties`.
* The game :math:`v(S)=\\mathcal F(\\theta^*_S)` and its cheap stand-ins (Eq. 6): retraining, fine-tuning and
  sparsified fine-tuning (prune with :func:`magnitude_prune`, recover on all data, fine-tune per subset):
  :func:`subset_game`, :func:`sparsify`.
* Attributions: exact Shapley (its definition), KernelSHAP as constrained weighted least squares with the
  closed form of Covert and Lee (2021, eq. 7; Eq. 5 of the paper), leave-one-out and Banzhaf:
  :func:`exact_shapley`, :func:`kernel_shap`, :func:`sample_shapley_subsets`, :func:`leave_one_out`,
  :func:`banzhaf`.
* The linear datamodeling score (Definition 2): :func:`lds`; the evaluations of Fig. 2 (LDS at a compute
  budget, :func:`lds_at_budget`, with costs from :func:`coalition_cost`) and Fig. 3 (remove the top or bottom
  contributors and retrain, :func:`counterfactual_change`); :func:`run_games` computes one seed's games.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch
from scipy.stats import spearmanr

__all__ = [
    "MODE_RADIUS", "MODE_SIGMA", "N_MODES", "Schedule", "all_subsets", "banzhaf", "diversity_entropy",
    "exact_shapley", "global_properties", "inception_score_analogue", "init_denoisers", "kernel_shap",
    "lds", "leave_one_out", "linear_beta_schedule", "magnitude_prune", "make_contributors", "mode_centers",
    "n_params", "precision", "sample_denoisers", "sample_shapley_subsets", "shapley_kernel_weights",
    "sparsify", "subset_codes", "subset_game", "train_denoisers", "run_games", "lds_at_budget",
    "coalition_cost",
    "counterfactual_change", "gradient_attribution", "PROPERTIES",
]

N_MODES = 8          # modes of the ring-of-Gaussians world
MODE_RADIUS = 2.0    # radius of the ring
MODE_SIGMA = 0.15    # standard deviation of a clean mode
TIME_FEATURES = 16   # sinusoidal time-embedding size


# ------------------------------------------------------------------------------------------------
# Data: contributors of a 2-D "image" world
# ------------------------------------------------------------------------------------------------
def mode_centers(n_modes: int = N_MODES, radius: float = MODE_RADIUS) -> np.ndarray:
    """The ``(n_modes, 2)`` centres of the mixture, evenly spaced on a circle of ``radius``."""
    if n_modes < 1:
        raise ValueError(f"n_modes must be >= 1, got {n_modes}")
    angles = 2 * np.pi * np.arange(n_modes) / n_modes
    return radius * np.stack([np.cos(angles), np.sin(angles)], axis=1)


# contributor i: (modes it draws from, its standard deviation, fraction of uniform outliers)
_DESIGN = [
    ((0,), MODE_SIGMA, 0.0),      # 0: clean mode 0
    ((1,), MODE_SIGMA, 0.0),      # 1: clean mode 1
    ((2, 3), MODE_SIGMA, 0.0),    # 2: two clean modes
    ((0, 1), MODE_SIGMA, 0.0),    # 3: redundant with 0 and 1
    ((4,), 0.6, 0.0),             # 4: blurry (low quality)
    ((5,), MODE_SIGMA, 0.5),      # 5: half outliers
    ((6,), MODE_SIGMA, 0.0),      # 6: clean and rare
    ((7,), 0.35, 0.2),            # 7: blurry with some outliers
]


def make_contributors(points_per_contributor: int = 64, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Eight contributors of a ring of eight Gaussians, designed to differ in redundancy and quality.

    Returns ``X`` of shape ``(8 * points_per_contributor, 2)`` (float32) and ``owner`` (int), the
    contributor of each point (the group :math:`\\mathcal D_i` of Definition 1).
    """
    if isinstance(points_per_contributor, bool) or not isinstance(points_per_contributor, (int, np.integer)):
        raise TypeError(f"points_per_contributor must be an int, got {type(points_per_contributor).__name__}")
    if points_per_contributor < 1:
        raise ValueError(f"points_per_contributor must be >= 1, got {points_per_contributor}")
    rng = np.random.default_rng(seed)
    centers = mode_centers()
    xs, owners = [], []
    for i, (modes, sigma, outliers) in enumerate(_DESIGN):
        m = rng.choice(np.asarray(modes), size=points_per_contributor)
        x = centers[m] + sigma * rng.standard_normal((points_per_contributor, 2))
        bad = rng.random(points_per_contributor) < outliers
        x[bad] = rng.uniform(-3.0, 3.0, size=(int(bad.sum()), 2))
        xs.append(x)
        owners.append(np.full(points_per_contributor, i))
    return np.concatenate(xs).astype(np.float32), np.concatenate(owners)


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
    return float(100 * spearmanr(pred, y).statistic)


# ------------------------------------------------------------------------------------------------
# Global properties of a generated distribution (no network needed: the mixture's exact posterior)
# ------------------------------------------------------------------------------------------------
def _as_samples(samples) -> torch.Tensor:
    x = torch.as_tensor(samples, dtype=torch.float32)
    if x.ndim == 2:
        x = x[None]
    if x.ndim != 3 or x.shape[-1] != 2:
        raise ValueError(f"samples must be (n, 2) or (models, n, 2), got shape {tuple(x.shape)}")
    return x


def _squared_distances(x: torch.Tensor) -> torch.Tensor:
    c = torch.as_tensor(mode_centers(), dtype=torch.float32)
    return ((x[..., None, :] - c) ** 2).sum(-1)   # (models, n, modes)


def inception_score_analogue(samples, far: float = 4.0) -> np.ndarray:
    """:math:`\\exp(\\mathbb E_x\\,\\mathrm{KL}(p(m\\mid x)\\,\\|\\,p(m)))` with the mixture's Bayes posterior
    :math:`p(m\\mid x)` as the "classifier" (the CIFAR-20 Inception Score's analogue); points farther than
    ``far`` standard deviations from every mode get a uniform posterior. Returns one value per model.
    """
    x = _as_samples(samples)
    d2 = _squared_distances(x) / MODE_SIGMA**2
    post = torch.softmax(-0.5 * d2, dim=-1)
    is_far = d2.min(-1).values > far**2
    post = torch.where(is_far[..., None], torch.full_like(post, 1.0 / N_MODES), post)
    marginal = post.mean(1, keepdim=True)
    kl = (post * (torch.log(post + 1e-12) - torch.log(marginal + 1e-12))).sum(-1)
    return torch.exp(kl.mean(1)).numpy().astype(float)


def diversity_entropy(samples, near: float = 3.0) -> np.ndarray:
    """Entropy (bits) of the histogram of nearest modes of the generated points within ``near``
    standard deviations of a mode (the CelebA-HQ demographic-diversity analogue). One value per model."""
    x = _as_samples(samples)
    d2 = _squared_distances(x) / MODE_SIGMA**2
    nearest = d2.argmin(-1)
    keep = d2.min(-1).values <= near**2
    counts = torch.zeros(x.shape[0], N_MODES).scatter_add_(1, nearest, keep.float())
    p = counts / counts.sum(1, keepdim=True).clamp_min(1.0)
    return (-(p * torch.log2(p.clamp_min(1e-12))).sum(1)).numpy().astype(float)


def precision(samples, near: float = 3.0) -> np.ndarray:
    """Fraction of generated points within ``near`` standard deviations of a mode (a quality score,
    the analogue of ArtBench's aesthetic score). One value per model."""
    x = _as_samples(samples)
    d2 = _squared_distances(x) / MODE_SIGMA**2
    return (d2.min(-1).values <= near**2).float().mean(1).numpy().astype(float)


PROPERTIES = {"IS": inception_score_analogue, "diversity": diversity_entropy, "precision": precision}


def global_properties(samples) -> dict[str, np.ndarray]:
    """All three global properties :math:`\\mathcal F` of each model's samples, as a dict of arrays."""
    return {name: fn(samples) for name, fn in PROPERTIES.items()}


# ------------------------------------------------------------------------------------------------
# A DDPM whose many subset models train as one batched network
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Schedule:
    """DDPM noise schedule: :math:`\\beta_t`, :math:`\\alpha_t=1-\\beta_t`, :math:`\\bar\\alpha_t=\\prod_{s\\le t}\\alpha_s`."""

    betas: torch.Tensor
    alphas: torch.Tensor
    alpha_bars: torch.Tensor

    @property
    def T(self) -> int:
        return int(self.betas.numel())


def linear_beta_schedule(T: int = 100, beta_min: float = 1e-4, beta_max: float = 0.05) -> Schedule:
    """Linear :math:`\\beta_t` from ``beta_min`` to ``beta_max`` over ``T`` steps (Ho et al. 2020)."""
    if isinstance(T, bool) or not isinstance(T, (int, np.integer)) or T < 1:
        raise ValueError(f"T must be a positive int, got {T!r}")
    if not 0 < beta_min <= beta_max < 1:
        raise ValueError(f"need 0 < beta_min <= beta_max < 1, got {beta_min}, {beta_max}")
    betas = torch.linspace(beta_min, beta_max, int(T), dtype=torch.float64)
    alphas = 1 - betas
    return Schedule(betas.float(), alphas.float(), torch.cumprod(alphas, 0).float())


def _time_embedding(t: torch.Tensor, T: int) -> torch.Tensor:
    half = TIME_FEATURES // 2
    freqs = torch.exp(-math.log(100.0) * torch.arange(half, dtype=torch.float32) / half)
    angle = (t.float() / T)[..., None] * freqs * 2 * math.pi * 4
    return torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1)


def init_denoisers(n_models: int, hidden: int = 32, seed: int = 0) -> dict[str, torch.Tensor]:
    """Independent initialisations of ``n_models`` MLP denoisers
    :math:`\\epsilon_\\theta(x_t,t)`: (x, 16-d time embedding) -> hidden -> hidden -> 2, SiLU.

    Parameters are stacked along a leading model axis (``W1`` is ``(n_models, 18, hidden)``), so that one
    batched matrix product runs every model at once.
    """
    if n_models < 1 or hidden < 1:
        raise ValueError(f"n_models and hidden must be >= 1, got {n_models}, {hidden}")
    g = torch.Generator().manual_seed(int(seed))
    sizes = [(2 + TIME_FEATURES, hidden), (hidden, hidden), (hidden, 2)]
    params = {}
    for layer, (fan_in, fan_out) in enumerate(sizes, start=1):
        bound = 1 / math.sqrt(fan_in)
        params[f"W{layer}"] = (torch.rand(n_models, fan_in, fan_out, generator=g) * 2 - 1) * bound
        params[f"b{layer}"] = (torch.rand(n_models, 1, fan_out, generator=g) * 2 - 1) * bound
    return params


def n_params(params: dict[str, torch.Tensor]) -> int:
    """Number of parameters of ONE model of a stack."""
    return int(sum(p[0].numel() for p in params.values()))


def _forward(params: dict[str, torch.Tensor], x: torch.Tensor, t: torch.Tensor, T: int) -> torch.Tensor:
    """:math:`\\epsilon_\\theta(x_t, t)` for every model: ``x`` is ``(models, batch, 2)``."""
    h = torch.cat([x, _time_embedding(t, T)], dim=-1)
    h = torch.nn.functional.silu(torch.baddbmm(params["b1"], h, params["W1"]))
    h = torch.nn.functional.silu(torch.baddbmm(params["b2"], h, params["W2"]))
    return torch.baddbmm(params["b3"], h, params["W3"])


def _check_params(params) -> int:
    if not isinstance(params, dict) or set(params) != {"W1", "b1", "W2", "b2", "W3", "b3"}:
        raise TypeError("params must be a dict with keys W1, b1, W2, b2, W3, b3 (see init_denoisers)")
    return int(params["W1"].shape[0])


def train_denoisers(params: dict[str, torch.Tensor], X, owner, masks, schedule: Schedule, steps: int,
                    lr: float = 3e-3, batch: int = 64, seed: int = 0) -> dict[str, torch.Tensor]:
    """Train model ``k`` of the stack on the data of coalition ``masks[k]`` (the algorithm
    :math:`\\mathcal A(\\mathcal D_S)`): Adam on the DDPM loss
    :math:`\\|\\epsilon-\\epsilon_\\theta(\\sqrt{\\bar\\alpha_t}x_0+\\sqrt{1-\\bar\\alpha_t}\\epsilon,t)\\|^2`.

    Every model draws its own minibatch from its own coalition; summing the per-model losses gives each
    model exactly its own gradient, and Adam is elementwise, so the stack trains ``K`` independent models.
    Returns new (detached) parameters; ``params`` is not modified. ``steps=0`` returns a copy.
    """
    K = _check_params(params)
    masks = np.asarray(masks, dtype=bool)
    owner = np.asarray(owner)
    if masks.ndim != 2 or masks.shape[0] != K:
        raise ValueError(f"masks must be ({K}, n_contributors), got shape {masks.shape}")
    if steps < 0 or batch < 1 or lr <= 0:
        raise ValueError(f"need steps >= 0, batch >= 1, lr > 0; got {steps}, {batch}, {lr}")
    if not masks.any(axis=1).all():
        raise ValueError("every coalition in masks must be non-empty (the empty set is the untrained model)")
    X = torch.as_tensor(np.asarray(X), dtype=torch.float32)
    member = masks[:, owner]                                                  # (K, N): point in coalition?
    counts = torch.as_tensor(member.sum(1), dtype=torch.float32)[:, None]     # |D_S| per model
    pool = torch.as_tensor(np.argsort(~member, axis=1, kind="stable"))        # coalition's points first
    theta = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    opt = torch.optim.Adam(list(theta.values()), lr=lr, fused=True)
    g = torch.Generator().manual_seed(int(seed) + 1)
    ab = schedule.alpha_bars
    for _ in range(int(steps)):
        slot = (torch.rand(K, batch, generator=g) * counts).long()            # uniform over D_S, with replacement
        idx = torch.gather(pool, 1, slot)                                     # (K, B) data indices
        x0 = X[idx]
        t = torch.randint(0, schedule.T, (K, batch), generator=g)
        eps = torch.randn(K, batch, 2, generator=g)
        a = ab[t][..., None]
        xt = a.sqrt() * x0 + (1 - a).sqrt() * eps
        loss = ((_forward(theta, xt, t, schedule.T) - eps) ** 2).mean(dim=(1, 2)).sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return {k: v.detach() for k, v in theta.items()}


@torch.no_grad()
def sample_denoisers(params: dict[str, torch.Tensor], n_samples: int, schedule: Schedule,
                     seed: int = 0) -> torch.Tensor:
    """Ancestral DDPM sampling with :math:`\\sigma_t^2=\\beta_t`:
    :math:`x_{t-1}=\\frac1{\\sqrt{\\alpha_t}}(x_t-\\frac{\\beta_t}{\\sqrt{1-\\bar\\alpha_t}}\\epsilon_\\theta(x_t,t))+\\sigma_tz`.
    Returns ``(models, n_samples, 2)``."""
    K = _check_params(params)
    if n_samples < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples}")
    g = torch.Generator().manual_seed(int(seed) + 2)
    x = torch.randn(K, n_samples, 2, generator=g)
    for t in range(schedule.T - 1, -1, -1):
        tt = torch.full((K, n_samples), t)
        eps = _forward(params, x, tt, schedule.T)
        b, a, ab = schedule.betas[t], schedule.alphas[t], schedule.alpha_bars[t]
        x = (x - b / (1 - ab).sqrt() * eps) / a.sqrt()
        if t > 0:
            x = x + b.sqrt() * torch.randn(K, n_samples, 2, generator=g)
    return x


# ------------------------------------------------------------------------------------------------
# Structured magnitude pruning (torch-pruning's group-L2 MagnitudeImportance on an MLP)
# ------------------------------------------------------------------------------------------------
def magnitude_prune(params: dict[str, torch.Tensor], ratio: float) -> dict[str, torch.Tensor]:
    """Remove a fraction ``ratio`` of the hidden units of each hidden layer of every model in the stack.

    A unit's importance is the squared L2 norm of its group: its incoming weights (a column of
    ``W_l``) plus its outgoing weights (a row of ``W_{l+1}``); torch-pruning's ``MagnitudeImportance``
    (p=2, mean reduction, biases excluded) ranks units the same way. Kept units stay in their order.
    All models of a stack must keep the same number of units, so the stack stays rectangular.
    """
    K = _check_params(params)
    if not 0 <= ratio < 1:
        raise ValueError(f"ratio must be in [0, 1), got {ratio}")
    out = {k: v.clone() for k, v in params.items()}
    for layer in (1, 2):
        W_in, W_out = out[f"W{layer}"], out[f"W{layer + 1}"]
        width = W_in.shape[2]
        keep_n = width - int(math.floor(ratio * width))
        importance = (W_in**2).sum(1) + (W_out**2).sum(2)                        # (K, width)
        keep = importance.topk(keep_n, dim=1).indices.sort(dim=1).values          # (K, keep_n)
        ar = torch.arange(K)[:, None]
        out[f"W{layer}"] = W_in.transpose(1, 2)[ar, keep].transpose(1, 2).contiguous()
        out[f"b{layer}"] = out[f"b{layer}"].transpose(1, 2)[ar, keep].transpose(1, 2).contiguous()
        out[f"W{layer + 1}"] = W_out[ar, keep].contiguous()
    return out


def coalition_cost(n_params_model: int, steps: int, batch: int, T: int, n_samples: int) -> float:
    """Multiply-adds to evaluate one coalition: ``steps`` training steps (forward + backward, about three
    forward passes) on ``batch`` examples plus ``T`` sampling steps on ``n_samples`` points, one forward pass
    costing about ``n_params_model`` multiply-adds. A load-independent proxy for the run time of Table 2."""
    for name, value in (("n_params_model", n_params_model), ("steps", steps), ("batch", batch), ("T", T),
                        ("n_samples", n_samples)):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    return float(n_params_model) * (3.0 * steps * batch + float(T) * n_samples)


def _replicate(params: dict[str, torch.Tensor], K: int) -> dict[str, torch.Tensor]:
    if params["W1"].shape[0] != 1:
        raise ValueError("a base model to fine-tune must be a stack of one model")
    return {k: v.expand(K, *v.shape[1:]).clone() for k, v in params.items()}


# ------------------------------------------------------------------------------------------------
# The game: retrain / fine-tune / sparsified fine-tune, for many coalitions at once
# ------------------------------------------------------------------------------------------------
def sparsify(full_params: dict[str, torch.Tensor], X, owner, schedule: Schedule, ratio: float = 0.5,
             recover_steps: int = 500, lr: float = 3e-3, batch: int = 64, seed: int = 0
             ) -> dict[str, torch.Tensor]:
    """Steps 2-3 of sparsified fine-tuning: prune the full model :math:`\\theta^*` once, then fine-tune the
    pruned model on ALL the data for ``recover_steps`` to get :math:`\\tilde\\theta^*`."""
    pruned = magnitude_prune(full_params, ratio)
    n = int(np.max(owner)) + 1
    return train_denoisers(pruned, X, owner, np.ones((1, n), dtype=bool), schedule, recover_steps,
                           lr=lr, batch=batch, seed=seed)


def subset_game(masks, X, owner, schedule: Schedule, steps: int, init: dict[str, torch.Tensor] | None = None,
                hidden: int = 32, lr: float = 3e-3, batch: int = 64, n_samples: int = 256, seed: int = 0,
                chunk: int = 256) -> dict:
    """Evaluate the game on coalitions ``masks``: for each :math:`S`, train a model on :math:`\\mathcal D_S`
    and compute every global property of its samples.

    * ``init=None``: **retrain** from scratch (independent initialisations, seeded by ``seed``),
      :math:`v(S)=\\mathcal F(\\theta^*_S)`.
    * ``init`` = a one-model stack: **fine-tune** it for ``steps`` on each :math:`\\mathcal D_S`,
      :math:`\\mathcal F(\\tilde\\theta^{\\rm ft}_{S,k})` (Eq. 6); a pruned and recovered ``init`` gives
      **sparsified fine-tuning**.

    ``hidden`` is the width of models trained from scratch and of the null model. The empty coalition gets
    the untrained (null) model's value, as in the official code. Returns a dict
    with one array per property (aligned with ``masks``) and ``"cpu_seconds"``, the CPU time spent
    (training plus sampling; fine-tuning excludes the one-off cost of ``init``).
    """
    masks = np.asarray(masks, dtype=bool)
    if masks.ndim != 2:
        raise ValueError(f"masks must be (subsets, contributors), got shape {masks.shape}")
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    start = time.process_time()
    out = {name: np.zeros(len(masks)) for name in PROPERTIES}
    nonempty = np.flatnonzero(masks.any(axis=1))
    empty = np.flatnonzero(~masks.any(axis=1))
    for c0 in range(0, len(nonempty), chunk):
        rows = nonempty[c0:c0 + chunk]
        if init is None:
            theta = init_denoisers(len(rows), hidden, seed=seed * 100_003 + c0)
        else:
            theta = _replicate(init, len(rows))
        theta = train_denoisers(theta, X, owner, masks[rows], schedule, steps, lr=lr, batch=batch,
                                seed=seed * 100_003 + c0)
        props = global_properties(sample_denoisers(theta, n_samples, schedule, seed=seed + c0))
        for name, vals in props.items():
            out[name][rows] = vals
    if len(empty):
        null = init_denoisers(1, hidden, seed=seed * 100_003 + 99_991)
        props = global_properties(sample_denoisers(null, n_samples, schedule, seed=seed))
        for name, vals in props.items():
            out[name][empty] = vals[0]
    out["cpu_seconds"] = time.process_time() - start
    return out


# ------------------------------------------------------------------------------------------------
# The chapter's experiment: every game one seed needs, in one call (cache it with disk_cache)
# ------------------------------------------------------------------------------------------------
def run_games(seed: int = 0, points_per_contributor: int = 64, T: int = 100, beta_max: float = 0.05,
              hidden: int = 32, retrain_steps: int = 500, ft_steps: int = 200, recover_steps: int = 300,
              prune_ratio: float = 0.5, lr: float = 1e-2, batch: int = 32, n_samples: int = 256,
              eval_sizes: tuple[int, ...] = (4, 5)) -> dict:
    """Everything one seed of the chapter needs (all numbers computed here, nothing stored by hand):

    * ``"retrain"``: the ground-truth game on all :math:`2^n` coalitions (retraining from scratch);
    * ``"eval_masks"``/``"eval"``: coalitions of the sizes ``eval_sizes`` retrained with an independent
      seed (the LDS test set, :math:`\\alpha=0.5`, and the counterfactual "remove 3 of 8" sets);
    * ``"finetune"``: fine-tuning the full model for ``ft_steps`` on every coalition;
    * ``"sparsified"``: pruning the full model by ``prune_ratio``, recovering for ``recover_steps`` on all
      data, then fine-tuning for ``ft_steps`` on every coalition;
    * ``"setup_seconds"``: CPU time of training the full model and of prune + recover;
    * ``"n_params"``: parameter counts of the full and the pruned denoiser;
    * ``"macs"``: multiply-adds per coalition of each value function and of prune + recover
      (:func:`coalition_cost`);
    * ``"X"``, ``"owner"``, ``"full_model"``, ``"sparse_model"``: the data, the full model :math:`\\theta^*` and
      the pruned and recovered model :math:`\\tilde\\theta^*`.
    """
    X, owner = make_contributors(points_per_contributor, seed=seed)
    schedule = linear_beta_schedule(T, 1e-4, beta_max)
    n = int(owner.max()) + 1
    masks = all_subsets(n)
    kw = dict(lr=lr, batch=batch, n_samples=n_samples, hidden=hidden)
    # warm-up (not timed): the first call of a process pays one-off costs (allocator, kernel set-up) that
    # would otherwise inflate whichever game's CPU time is measured first
    subset_game(masks[1:3], X, owner, schedule, 2, seed=seed, **kw)
    retrain = subset_game(masks, X, owner, schedule, retrain_steps, seed=seed, **kw)
    sizes = masks.sum(1)
    eval_masks = masks[np.isin(sizes, eval_sizes)]
    evaluation = subset_game(eval_masks, X, owner, schedule, retrain_steps, seed=seed + 1000, **kw)
    t0 = time.process_time()
    full = train_denoisers(init_denoisers(1, hidden, seed=seed + 2000), X, owner, np.ones((1, n), bool),
                           schedule, retrain_steps, lr=lr, batch=batch, seed=seed + 2000)
    t1 = time.process_time()
    small = sparsify(full, X, owner, schedule, prune_ratio, recover_steps, lr=lr, batch=batch, seed=seed + 3000)
    t2 = time.process_time()
    finetune = subset_game(masks, X, owner, schedule, ft_steps, init=full, seed=seed, **kw)
    sparsified = subset_game(masks, X, owner, schedule, ft_steps, init=small, seed=seed, **kw)
    P_full, P_small = n_params(full), n_params(small)
    macs = {"retrain": coalition_cost(P_full, retrain_steps, batch, T, n_samples),
            "finetune": coalition_cost(P_full, ft_steps, batch, T, n_samples),
            "sparsified": coalition_cost(P_small, ft_steps, batch, T, n_samples),
            "prune + recover": coalition_cost(P_small, recover_steps, batch, 0, 0)}
    return {"masks": masks, "retrain": retrain, "eval_masks": eval_masks, "eval": evaluation,
            "finetune": finetune, "sparsified": sparsified,
            "setup_seconds": {"full model": t1 - t0, "prune + recover": t2 - t1},
            "n_params": {"full": P_full, "pruned": P_small}, "macs": macs, "X": X, "owner": owner,
            "full_model": full, "sparse_model": small}


# ------------------------------------------------------------------------------------------------
# Evaluation helpers for the reproduction (Fig. 2 and Fig. 3 analogues)
# ------------------------------------------------------------------------------------------------
def lds_at_budget(values: np.ndarray, cost_per_subset: float, setup_cost: float, budgets, test_masks,
                  test_values, draws: int = 30, rng: np.random.Generator | int | None = None) -> np.ndarray:
    """LDS of KernelSHAP (paired sampling) when the game may be evaluated only as often as a compute
    ``budget`` allows: :math:`M=\\lfloor(B-\\text{setup})/c\\rfloor` coalitions (Fig. 2's x-axis).

    ``values`` is the game on all :math:`2^n` coalitions (so drawing coalitions costs a look-up, while
    the budget is charged as if each had been computed). Budgets that buy fewer than 2 coalitions give
    NaN. Returns ``(len(budgets), draws)`` LDS values.
    """
    values, n = _check_game(values)
    if cost_per_subset <= 0 or setup_cost < 0:
        raise ValueError(f"need cost_per_subset > 0 and setup_cost >= 0, got {cost_per_subset}, {setup_cost}")
    if draws < 1:
        raise ValueError(f"draws must be >= 1, got {draws}")
    rng = np.random.default_rng(rng)
    budgets = np.atleast_1d(np.asarray(budgets, dtype=float))
    out = np.full((len(budgets), draws), np.nan)
    for b, budget in enumerate(budgets):
        m = int(np.floor((budget - setup_cost) / cost_per_subset))
        if m < 2:
            continue
        for d in range(draws):
            z = sample_shapley_subsets(n, m, rng, paired=True)
            phi = kernel_shap(z, values[subset_codes(z)], values[0], values[-1])
            out[b, d] = lds(phi, test_masks, test_values)
    return out


def _loss_gradients(params: dict[str, torch.Tensor], points: torch.Tensor, schedule: Schedule,
                    t: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
    """Per-point gradients of the DDPM loss of a one-model stack, at the same fixed draws ``(t, eps)``
    for every point: rows of shape ``(n_points, n_params)``."""
    from torch.func import grad, vmap

    ab = schedule.alpha_bars[t][:, None]                                        # (draws, 1)

    def loss(theta, x):
        xt = ab.sqrt() * x + (1 - ab).sqrt() * eps                              # (draws, 2)
        pred = _forward(theta, xt[None], t[None], schedule.T)[0]
        return ((pred - eps) ** 2).mean()

    grads = vmap(grad(loss), in_dims=(None, 0))(params, points)
    return torch.cat([grads[k].reshape(points.shape[0], -1) for k in sorted(grads)], dim=1)


def gradient_attribution(params: dict[str, torch.Tensor], X, owner, samples, schedule: Schedule,
                         method: str = "trak", n_draws: int = 32, proj_dim: int = 128,
                         damping: float = 1e-3, seed: int = 0) -> np.ndarray:
    r"""Gradient-based attribution of a model's generated distribution to contributors (the baselines of
    the paper's Table 1): a local score of every training point for every generated sample, averaged
    over the generated samples and summed over each contributor's points (the official code's
    ``aggregate_by_class``).

    Features are the gradients of the DDPM loss at ``n_draws`` fixed (timestep, noise) pairs shared by
    all points (D-TRAK's choice of output function), :math:`g_j=
abla_	heta\mathcal L(x_j)`.

    * ``method="trak"``: TRAK's kernel score on randomly projected gradients :math:`\phi=P^	op g`,
      :math:`	au_j=rac1S\sum_s\hat\phi_s^	op(\Phi^	op\Phi+\lambda I)^{-1}\phi_j` (D-TRAK without
      an ensemble); ``proj_dim`` columns of a Gaussian :math:`P`, ``damping`` :math:`\lambda` relative to
      the mean diagonal of :math:`\Phi^	op\Phi`.
    * ``method="cosine"``: gradient similarity, the mean cosine between :math:`g_j` and the generated
      samples' gradients :math:`\hat g_s`.

    ``params`` is a one-model stack (the full model :math:`	heta^*`), ``samples`` ``(S, 2)`` points it
    generated. Returns one score per contributor.
    """
    if method not in ("trak", "cosine"):
        raise ValueError(f"method must be 'trak' or 'cosine', got {method!r}")
    if _check_params(params) != 1:
        raise ValueError("params must be a stack of one model")
    if n_draws < 1 or proj_dim < 1 or damping < 0:
        raise ValueError(f"need n_draws >= 1, proj_dim >= 1, damping >= 0; got {n_draws}, {proj_dim}, {damping}")
    owner = np.asarray(owner)
    X = torch.as_tensor(np.asarray(X), dtype=torch.float32)
    S = _as_samples(samples)
    if S.shape[0] != 1:
        raise ValueError("samples must be the (S, 2) points of one model")
    if X.shape != (owner.size, 2):
        raise ValueError(f"X must be (len(owner), 2), got {tuple(X.shape)} for {owner.size} owners")
    g = torch.Generator().manual_seed(int(seed) + 7)
    t = torch.randint(0, schedule.T, (n_draws,), generator=g)
    eps = torch.randn(n_draws, 2, generator=g)
    theta = {k: v[:1] for k, v in params.items()}
    G_train = _loss_gradients(theta, X, schedule, t, eps).double()
    G_gen = _loss_gradients(theta, S[0], schedule, t, eps).double()
    if method == "cosine":
        a = G_train / G_train.norm(dim=1, keepdim=True).clamp_min(1e-12)
        b = G_gen / G_gen.norm(dim=1, keepdim=True).clamp_min(1e-12)
        per_point = (a @ b.T).mean(1)
    else:
        P = torch.randn(G_train.shape[1], proj_dim, generator=g).double() / math.sqrt(proj_dim)
        phi, phi_gen = G_train @ P, G_gen @ P
        K = phi.T @ phi
        K = K + damping * K.diagonal().mean() * torch.eye(proj_dim, dtype=K.dtype)
        per_point = phi @ torch.linalg.solve(K, phi_gen.mean(0))
    per_point = per_point.numpy()
    n = int(owner.max()) + 1
    return np.array([per_point[owner == i].sum() for i in range(n)])


def counterfactual_change(attributions: np.ndarray, k: int, lookup: dict[int, float], full_value: float
                          ) -> tuple[float, float]:
    """Fig. 3's counterfactual: the relative change (%) of the property after removing the ``k`` top-
    and the ``k`` bottom-ranked contributors, ``100 (v(S) - v([n])) / |v([n])|``; ``lookup`` maps a
    coalition's bit code to the value of a model retrained on it."""
    tau = np.asarray(attributions, dtype=float)
    n = tau.size
    if not 1 <= k < n:
        raise ValueError(f"k must be in [1, {n - 1}], got {k}")
    if full_value == 0:
        raise ValueError("full_value must be non-zero")
    order = np.argsort(-tau, kind="stable")
    full = 2**n - 1
    top = full & ~int(sum(1 << int(i) for i in order[:k]))
    bottom = full & ~int(sum(1 << int(i) for i in order[-k:]))
    if top not in lookup or bottom not in lookup:
        raise ValueError("lookup must hold the coalitions left after removing the top and the bottom k")
    rel = lambda code: 100 * (lookup[code] - full_value) / abs(full_value)  # noqa: E731
    return rel(top), rel(bottom)
