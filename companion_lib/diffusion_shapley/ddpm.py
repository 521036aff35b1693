"""A DDPM whose many subset models train as one batched network (epsilon-prediction, ancestral sampling,
small MLP denoisers), and structured magnitude pruning of those denoisers, with the cost of a coalition."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

__all__ = [
    "Schedule", "init_denoisers", "linear_beta_schedule", "magnitude_prune", "n_params", "sample_denoisers",
    "train_denoisers", "coalition_cost", "TIME_FEATURES",
]


TIME_FEATURES = 16   # sinusoidal time-embedding size


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
    freqs = torch.exp(-math.log(100.0) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
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


def _time_table(T: int) -> torch.Tensor:
    """The time embedding of every step ``0..T-1``, ``(T, TIME_FEATURES)``: looked up instead of recomputed."""
    return _time_embedding(torch.arange(int(T)), T)


def _forward(params: dict[str, torch.Tensor], x: torch.Tensor, t: torch.Tensor, T: int,
             table: torch.Tensor | None = None) -> torch.Tensor:
    """:math:`\\epsilon_\\theta(x_t, t)` for every model: ``x`` is ``(models, batch, 2)``; ``table`` (optional) is
    :func:`_time_table` of ``T``, so the embedding is looked up rather than recomputed."""
    emb = _time_embedding(t, T) if table is None else table[t]
    h = torch.cat([x, emb], dim=-1)
    h = torch.nn.functional.silu(torch.baddbmm(params["b1"], h, params["W1"]))
    h = torch.nn.functional.silu(torch.baddbmm(params["b2"], h, params["W2"]))
    return torch.baddbmm(params["b3"], h, params["W3"])


def _check_params(params) -> int:
    if not isinstance(params, dict) or set(params) != {"W1", "b1", "W2", "b2", "W3", "b3"}:
        raise TypeError("params must be a dict with keys W1, b1, W2, b2, W3, b3 (see init_denoisers)")
    return int(params["W1"].shape[0])


def _on(device, params: dict[str, torch.Tensor]) -> torch.device:
    """``device`` if given, else the device of ``params``."""
    return params["W1"].device if device is None else torch.device(device)


def train_denoisers(params: dict[str, torch.Tensor], X, owner, masks, schedule: Schedule, steps: int,
                    lr: float = 3e-3, batch: int = 64, seed: int = 0, device=None) -> dict[str, torch.Tensor]:
    """Train model ``k`` of the stack on the data of coalition ``masks[k]`` (the algorithm
    :math:`\\mathcal A(\\mathcal D_S)`): Adam on the DDPM loss
    :math:`\\|\\epsilon-\\epsilon_\\theta(\\sqrt{\\bar\\alpha_t}x_0+\\sqrt{1-\\bar\\alpha_t}\\epsilon,t)\\|^2`.

    Every model draws its own minibatch from its own coalition; summing the per-model losses gives each
    model exactly its own gradient, and Adam is elementwise, so the stack trains ``K`` independent models.
    Returns new (detached) parameters; ``params`` is not modified. ``steps=0`` returns a copy.
    ``device`` (default: that of ``params``) is where the models train, e.g. a GPU; the random draws are made
    on the CPU's generator and moved there, so the CPU path is the same whatever the device argument.
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
    dev = _on(device, params)
    X = torch.as_tensor(np.asarray(X), dtype=torch.float32).to(dev)
    member = masks[:, owner]                                                  # (K, N): point in coalition?
    counts = torch.as_tensor(member.sum(1), dtype=torch.float32)[:, None].to(dev)   # |D_S| per model
    pool = torch.as_tensor(np.argsort(~member, axis=1, kind="stable")).to(dev)      # coalition's points first
    theta = {k: v.detach().to(dev).clone().requires_grad_(True) for k, v in params.items()}
    opt = torch.optim.Adam(list(theta.values()), lr=lr, fused=True)
    g = torch.Generator().manual_seed(int(seed) + 1)
    ab = schedule.alpha_bars.to(dev)
    table = _time_table(schedule.T).to(dev)
    for _ in range(int(steps)):
        slot = (torch.rand(K, batch, generator=g).to(dev) * counts).long()   # uniform over D_S, with replacement
        idx = torch.gather(pool, 1, slot)                                     # (K, B) data indices
        x0 = X[idx]
        t = torch.randint(0, schedule.T, (K, batch), generator=g).to(dev)
        eps = torch.randn(K, batch, 2, generator=g).to(dev)
        a = ab[t][..., None]
        xt = a.sqrt() * x0 + (1 - a).sqrt() * eps
        loss = ((_forward(theta, xt, t, schedule.T, table) - eps) ** 2).mean(dim=(1, 2)).sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return {k: v.detach() for k, v in theta.items()}


@torch.no_grad()
def sample_denoisers(params: dict[str, torch.Tensor], n_samples: int, schedule: Schedule,
                     seed: int = 0, device=None) -> torch.Tensor:
    """Ancestral DDPM sampling with :math:`\\sigma_t^2=\\beta_t`:
    :math:`x_{t-1}=\\frac1{\\sqrt{\\alpha_t}}(x_t-\\frac{\\beta_t}{\\sqrt{1-\\bar\\alpha_t}}\\epsilon_\\theta(x_t,t))+\\sigma_tz`.
    Returns ``(models, n_samples, 2)`` on ``device`` (default: that of ``params``; the noise is drawn on the
    CPU's generator and moved there)."""
    K = _check_params(params)
    if n_samples < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples}")
    g = torch.Generator().manual_seed(int(seed) + 2)
    dev = _on(device, params)
    params = {k: v.to(dev) for k, v in params.items()}
    x = torch.randn(K, n_samples, 2, generator=g).to(dev)
    # every point of a step shares t: its time embedding enters the first layer as one bias per model,
    # (b1 + e(t) W1[2:]), and only the 2-D point goes through W1[:2] (the same network as _forward)
    table = _time_table(schedule.T).to(dev)
    W1x, W1t = params["W1"][:, :2], params["W1"][:, 2:]
    silu = torch.nn.functional.silu
    for t in range(schedule.T - 1, -1, -1):
        bias1 = torch.baddbmm(params["b1"], table[t].expand(K, 1, -1), W1t)                   # (K, 1, hidden)
        h = silu(torch.baddbmm(bias1, x, W1x), inplace=True)
        h = silu(torch.baddbmm(params["b2"], h, params["W2"]), inplace=True)
        eps = torch.baddbmm(params["b3"], h, params["W3"])
        b, a, ab = schedule.betas[t], schedule.alphas[t], schedule.alpha_bars[t]
        x = (x - b / (1 - ab).sqrt() * eps) / a.sqrt()
        if t > 0:
            x = x + b.sqrt() * torch.randn(K, n_samples, 2, generator=g).to(dev)
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
