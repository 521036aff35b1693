"""The chapter's experiment: every game one seed needs (:func:`run_games`), and the evaluations of the
reproduction (LDS at a compute budget, Fig. 2; a gradient-based attribution baseline; the counterfactual
change when top or bottom contributors are removed, Fig. 3)."""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from ..common.device import resolve_device
from .attribution import _check_game, all_subsets, kernel_shap, lds, sample_shapley_subsets, subset_codes
from .ddpm import (Schedule, _check_params, _forward, coalition_cost, init_denoisers, linear_beta_schedule, n_params,
                   train_denoisers)
from .game import _as_samples, make_contributors, sparsify, subset_game

__all__ = ["run_games", "lds_at_budget", "counterfactual_change", "gradient_attribution"]


# ------------------------------------------------------------------------------------------------
# The chapter's experiment: every game one seed needs, in one call (cache it with disk_cache)
# ------------------------------------------------------------------------------------------------
def run_games(seed: int = 0, points_per_contributor: int = 64, T: int = 100, beta_max: float = 0.05,
              hidden: int = 32, retrain_steps: int = 500, ft_steps: int = 200, recover_steps: int = 300,
              prune_ratio: float = 0.5, lr: float = 1e-2, batch: int = 32, n_samples: int = 256,
              eval_sizes: tuple[int, ...] = (4, 5), device=None) -> dict:
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
      the pruned and recovered model :math:`\\tilde\\theta^*` (on the CPU).

    ``device`` (default :func:`companion_lib.common.device`: the GPU when present, else the CPU) is where the
    models train and sample; on the CPU the results are the same numbers whatever the argument.
    """
    dev = resolve_device(device)
    X, owner = make_contributors(points_per_contributor, seed=seed)
    schedule = linear_beta_schedule(T, 1e-4, beta_max)
    n = int(owner.max()) + 1
    masks = all_subsets(n)
    kw = dict(lr=lr, batch=batch, n_samples=n_samples, hidden=hidden, device=dev)
    # warm-up (not timed): the first call of a process pays one-off costs (allocator, kernel set-up) that
    # would otherwise inflate whichever game's CPU time is measured first
    subset_game(masks[1:3], X, owner, schedule, 2, seed=seed, **kw)
    retrain = subset_game(masks, X, owner, schedule, retrain_steps, seed=seed, **kw)
    sizes = masks.sum(1)
    eval_masks = masks[np.isin(sizes, eval_sizes)]
    evaluation = subset_game(eval_masks, X, owner, schedule, retrain_steps, seed=seed + 1000, **kw)
    t0 = time.process_time()
    full = train_denoisers(init_denoisers(1, hidden, seed=seed + 2000), X, owner, np.ones((1, n), bool),
                           schedule, retrain_steps, lr=lr, batch=batch, seed=seed + 2000, device=dev)
    t1 = time.process_time()
    small = sparsify(full, X, owner, schedule, prune_ratio, recover_steps, lr=lr, batch=batch, seed=seed + 3000,
                     device=dev)
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
            "full_model": {k: v.cpu() for k, v in full.items()},
            "sparse_model": {k: v.cpu() for k, v in small.items()}}


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
