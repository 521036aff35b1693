"""The game :math:`v(S)=\\mathcal F(\\theta^*_S)`: the contributors of a 2-D "image" world, the global
properties :math:`\\mathcal F` of a generated distribution (Definition 1), and the game's values by
retraining, fine-tuning or sparsified fine-tuning (Eq. 6) for many coalitions at once."""

from __future__ import annotations

import time

import numpy as np
import torch

from .ddpm import Schedule, _replicate, init_denoisers, magnitude_prune, sample_denoisers, train_denoisers

__all__ = [
    "MODE_RADIUS", "MODE_SIGMA", "N_MODES", "diversity_entropy", "global_properties", "inception_score_analogue",
    "make_contributors", "mode_centers", "precision", "sparsify", "subset_game", "PROPERTIES",
]


N_MODES = 8          # modes of the ring-of-Gaussians world
MODE_RADIUS = 2.0    # radius of the ring
MODE_SIGMA = 0.15    # standard deviation of a clean mode


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
# The game: retrain / fine-tune / sparsified fine-tune, for many coalitions at once
# ------------------------------------------------------------------------------------------------
def sparsify(full_params: dict[str, torch.Tensor], X, owner, schedule: Schedule, ratio: float = 0.5,
             recover_steps: int = 500, lr: float = 3e-3, batch: int = 64, seed: int = 0, device=None
             ) -> dict[str, torch.Tensor]:
    """Steps 2-3 of sparsified fine-tuning: prune the full model :math:`\\theta^*` once, then fine-tune the
    pruned model on ALL the data for ``recover_steps`` to get :math:`\\tilde\\theta^*`."""
    pruned = magnitude_prune(full_params, ratio)
    n = int(np.max(owner)) + 1
    return train_denoisers(pruned, X, owner, np.ones((1, n), dtype=bool), schedule, recover_steps,
                           lr=lr, batch=batch, seed=seed, device=device)


def subset_game(masks, X, owner, schedule: Schedule, steps: int, init: dict[str, torch.Tensor] | None = None,
                hidden: int = 32, lr: float = 3e-3, batch: int = 64, n_samples: int = 256, seed: int = 0,
                chunk: int = 256, device=None) -> dict:
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
    (training plus sampling; fine-tuning excludes the one-off cost of ``init``). ``device`` is where the
    models train and sample (default: the CPU, or the device of ``init``); the values are the same numbers on
    the CPU whatever the argument.
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
                                seed=seed * 100_003 + c0, device=device)
        props = global_properties(sample_denoisers(theta, n_samples, schedule, seed=seed + c0).cpu())
        for name, vals in props.items():
            out[name][rows] = vals
    if len(empty):
        null = init_denoisers(1, hidden, seed=seed * 100_003 + 99_991)
        props = global_properties(sample_denoisers(null, n_samples, schedule, seed=seed))
        for name, vals in props.items():
            out[name][empty] = vals[0]
    out["cpu_seconds"] = time.process_time() - start
    return out
