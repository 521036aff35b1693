r"""Training-algorithm submissions for the mini AlgoPerf competition.

A *submission* (AlgoPerf's word for a training algorithm) is an optimizer, a learning-rate schedule
and, in the external-tuning ruleset, a workload-agnostic search space; in the self-tuning ruleset it
is one fixed configuration.  Four submissions, after the competition's (Kasimbeg et al., ICLR 2025):

* ``nadamw`` -- the baseline: NAdamW with linear warm-up and cosine decay to zero at ``step_hint``;
* ``schedule_free_adamw`` -- Schedule-Free AdamW (Defazio et al., 2024), from the ``schedulefree``
  package, with the winning self-tuning configuration's :math:`\beta_2`, ``r`` and weight power;
* ``shampoo`` -- :class:`SimpleShampoo`, a compact teaching version of Shampoo (Gupta et al., 2018;
  Anil et al., 2020) with Adam grafting, the external-tuning winner's algorithm;
* ``sgd_nesterov`` -- SGD with Nesterov momentum, warm-up and cosine decay.

Shampoo, for a weight matrix :math:`W\in\mathbb R^{m\times n}` with gradient :math:`G_t`:

.. math::  L_t = \beta_2 L_{t-1} + (1-\beta_2) G_t G_t^\top,\qquad
           R_t = \beta_2 R_{t-1} + (1-\beta_2) G_t^\top G_t                          \qquad (S1)
.. math::  D_t = L_t^{-1/4}\, M_t\, R_t^{-1/4}                                         \qquad (S2)
.. math::  D_t \leftarrow D_t\,\lVert A_t\rVert_F / \lVert D_t\rVert_F \quad\text{(Adam grafting)} \qquad (S3)
.. math::  W_{t+1} = W_t - \eta_t\,(D_t + \lambda W_t)                                   \qquad (S4)

with :math:`M_t` the bias-corrected momentum (EMA of gradients, :math:`\beta_1`) and :math:`A_t` the
Adam direction :math:`M_t/(\sqrt{V_t}+\epsilon)`.  The inverse fourth roots are recomputed every
``precondition_frequency`` steps by an eigen-decomposition.  With ``stat_decay=None`` the factors
are plain sums :math:`L_t = \epsilon I + \sum_{i\le t} G_iG_i^\top` (the original Shampoo), which
``pytorch_optimizer.Shampoo`` also implements; the tests compare the two.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

__all__ = [
    "SUBMISSIONS", "SimpleShampoo", "Submission", "get_submission", "inverse_root",
    "warmup_cosine",
]


def inverse_root(matrix: torch.Tensor, p: int = 4, damping: float = 0.0) -> torch.Tensor:
    r""":math:`(A + \delta\lambda_{\max} I)^{-1/p}` of a symmetric PSD matrix by ``eigh`` (eq. S2).

    ``damping`` is relative to the largest eigenvalue (scale-free); eigenvalues are clipped at a
    tiny positive floor so round-off never produces a negative root.
    """
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"matrix must be square, got shape {tuple(matrix.shape)}")
    if p < 1:
        raise ValueError(f"p must be a positive integer, got {p}")
    if damping < 0:
        raise ValueError(f"damping must be >= 0, got {damping}")
    work = matrix.double()
    lam, vecs = torch.linalg.eigh(0.5 * (work + work.T))
    top = lam.max().clamp_min(1e-30)
    lam = lam.clamp_min(1e-30 * top) + damping * top
    return ((vecs * lam.pow(-1.0 / p)) @ vecs.T).to(matrix.dtype)


class SimpleShampoo(torch.optim.Optimizer):
    """Shampoo with Adam grafting, momentum and decoupled weight decay (eqs. S1-S4).

    Matrices (2-D parameters with both sides <= ``max_preconditioner_dim``) get Kronecker-factored
    preconditioners; every other parameter gets the Adam step.

    Parameters
    ----------
    lr: learning rate :math:`\\eta` (a scheduler may change it).
    betas: :math:`(\\beta_1, \\beta_2)` for momentum and the Adam second moment.
    stat_decay: :math:`\\beta_2` of the factors (S1); ``None`` sums them (original Shampoo).
    eps: Adam's :math:`\\epsilon`; also the factors' initial value :math:`\\epsilon I`.
    weight_decay: decoupled weight decay :math:`\\lambda`.
    precondition_frequency: recompute the inverse roots every this many steps.
    damping: relative damping of the inverse roots (see :func:`inverse_root`).
    graft: ``"adam"`` (S3) or ``None`` (the raw Shampoo direction).
    """

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 stat_decay: float | None = 0.999, eps: float = 1e-8, weight_decay: float = 0.0,
                 precondition_frequency: int = 10, damping: float = 1e-6, graft: str | None = "adam",
                 max_preconditioner_dim: int = 1024):
        if not lr > 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        if not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"betas must lie in [0, 1), got {betas}")
        if stat_decay is not None and not 0 <= stat_decay < 1:
            raise ValueError(f"stat_decay must lie in [0, 1) or be None, got {stat_decay}")
        if precondition_frequency < 1:
            raise ValueError(f"precondition_frequency must be >= 1, got {precondition_frequency}")
        if graft not in ("adam", None):
            raise ValueError(f"graft must be 'adam' or None, got {graft!r}")
        if weight_decay < 0 or eps < 0 or damping < 0:
            raise ValueError("weight_decay, eps and damping must be >= 0")
        defaults = dict(lr=lr, betas=betas, stat_decay=stat_decay, eps=eps, weight_decay=weight_decay,
                        precondition_frequency=precondition_frequency, damping=damping, graft=graft,
                        max_preconditioner_dim=max_preconditioner_dim)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["m"] = torch.zeros_like(p)
                    state["v"] = torch.zeros_like(p)
                    if p.ndim == 2 and max(p.shape) <= group["max_preconditioner_dim"]:
                        m, n = p.shape
                        state["L"] = group["eps"] * torch.eye(m, dtype=p.dtype)
                        state["R"] = group["eps"] * torch.eye(n, dtype=p.dtype)
                state["step"] += 1
                t = state["step"]
                state["m"].mul_(beta1).add_(g, alpha=1 - beta1)
                state["v"].mul_(beta2).addcmul_(g, g, value=1 - beta2)
                m_hat = state["m"] / (1 - beta1 ** t) if beta1 > 0 else g
                adam = m_hat / ((state["v"] / (1 - beta2 ** t)).sqrt() + group["eps"])
                direction = adam
                if "L" in state:
                    decay = group["stat_decay"]
                    if decay is None:  # original Shampoo: running sums
                        state["L"].add_(g @ g.T)
                        state["R"].add_(g.T @ g)
                    else:  # eq. (S1)
                        state["L"].mul_(decay).add_(g @ g.T, alpha=1 - decay)
                        state["R"].mul_(decay).add_(g.T @ g, alpha=1 - decay)
                    if (t - 1) % group["precondition_frequency"] == 0:
                        state["L_inv"] = inverse_root(state["L"], 4, group["damping"])
                        state["R_inv"] = inverse_root(state["R"], 4, group["damping"])
                    shampoo = state["L_inv"] @ m_hat @ state["R_inv"]  # eq. (S2)
                    if group["graft"] == "adam":  # eq. (S3)
                        shampoo = shampoo * (adam.norm() / shampoo.norm().clamp_min(1e-30))
                    direction = shampoo
                if group["weight_decay"]:
                    p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(direction, alpha=-group["lr"])  # eq. (S4)
        return loss


def warmup_cosine(step: int, step_hint: int, warmup_fraction: float) -> float:
    """Learning-rate multiplier: linear warm-up for ``warmup_fraction*step_hint`` steps, then
    cosine decay to 0 at ``step_hint`` (and 0 after it), as in the AlgoPerf baseline."""
    if step_hint < 1:
        raise ValueError(f"step_hint must be >= 1, got {step_hint}")
    if not 0 <= warmup_fraction < 1:
        raise ValueError(f"warmup_fraction must lie in [0, 1), got {warmup_fraction}")
    warmup = max(1, int(warmup_fraction * step_hint))
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, step_hint - warmup))
    return 0.5 * (1 + math.cos(math.pi * progress))


def _scheduled(optimizer: torch.optim.Optimizer, step_hint: int, warmup_fraction: float):
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: warmup_cosine(s, step_hint, warmup_fraction))


def _nadamw(params, hp: dict, step_hint: int):
    opt = torch.optim.NAdam(params, lr=hp["lr"], betas=(hp.get("beta1", 0.9), hp.get("beta2", 0.999)),
                            weight_decay=hp.get("weight_decay", 0.0), decoupled_weight_decay=True,
                            foreach=True)
    return opt, _scheduled(opt, step_hint, hp.get("warmup_fraction", 0.05))


def _sgd_nesterov(params, hp: dict, step_hint: int):
    opt = torch.optim.SGD(params, lr=hp["lr"], momentum=hp.get("momentum", 0.9), nesterov=True,
                          weight_decay=hp.get("weight_decay", 0.0), foreach=True)
    return opt, _scheduled(opt, step_hint, hp.get("warmup_fraction", 0.05))


def _shampoo(params, hp: dict, step_hint: int):
    opt = SimpleShampoo(params, lr=hp["lr"], betas=(hp.get("beta1", 0.9), hp.get("beta2", 0.999)),
                        stat_decay=hp.get("stat_decay", 0.999), weight_decay=hp.get("weight_decay", 0.0),
                        precondition_frequency=hp.get("precondition_frequency", 10))
    return opt, _scheduled(opt, step_hint, hp.get("warmup_fraction", 0.05))


def _schedule_free_adamw(params, hp: dict, step_hint: int):
    import schedulefree

    opt = schedulefree.AdamWScheduleFree(
        params, lr=hp["lr"], betas=(hp.get("beta1", 0.9), hp.get("beta2", 0.99552)),
        weight_decay=hp.get("weight_decay", 0.0), r=hp.get("r", 0.75),
        weight_lr_power=hp.get("weight_lr_power", 2.0),
        warmup_steps=max(1, int(hp.get("warmup_fraction", 0.05) * step_hint)))
    return opt, None  # schedule-free: no learning-rate schedule, no use of step_hint beyond warm-up


@dataclass(frozen=True)
class Submission:
    """A training algorithm: ``init_optimizer(params, hparams, step_hint) -> (optimizer, scheduler)``.

    ``search_space`` is the external-tuning list of configurations (one trial each);
    ``self_tuning`` the single configuration of the self-tuning ruleset. ``eval_mode`` says the
    optimizer must be switched with ``optimizer.eval()``/``.train()`` around evaluations
    (Schedule-Free evaluates at the averaged iterate :math:`x_t`).
    """

    name: str
    init_optimizer: Callable
    search_space: tuple[dict, ...]
    self_tuning: dict
    eval_mode: bool = False
    label: str = field(default="")


# search spaces are lists of points in priority order (AlgoPerf's baseline also used a fixed list)
_LRS = (0.012, 0.006, 0.024, 0.003, 0.048)
_ADAM_COMMON = dict(beta1=0.9, beta2=0.999, weight_decay=0.0, warmup_fraction=0.05)

#: The four submissions of the mini competition, keyed by name.
SUBMISSIONS = {
    "nadamw": Submission(
        "nadamw", _nadamw, tuple(dict(_ADAM_COMMON, lr=lr) for lr in _LRS),
        dict(_ADAM_COMMON, lr=0.012), label="NAdamW (baseline)"),
    "schedule_free_adamw": Submission(
        "schedule_free_adamw", _schedule_free_adamw,
        tuple(dict(beta1=0.9, beta2=0.99552, warmup_fraction=0.05, lr=lr) for lr in _LRS),
        dict(beta1=0.9, beta2=0.99552, warmup_fraction=0.05, lr=0.012),
        eval_mode=True, label="Schedule-Free AdamW"),
    "shampoo": Submission(
        "shampoo", _shampoo, tuple(dict(_ADAM_COMMON, lr=lr) for lr in _LRS),
        dict(_ADAM_COMMON, lr=0.012), label="Shampoo (Adam grafting)"),
    "sgd_nesterov": Submission(
        "sgd_nesterov", _sgd_nesterov,
        tuple(dict(momentum=0.9, warmup_fraction=0.05, lr=lr) for lr in (0.2, 0.1, 0.4, 0.05, 0.8)),
        dict(momentum=0.9, warmup_fraction=0.05, lr=0.2), label="SGD + Nesterov"),
}


def get_submission(name: str) -> Submission:
    """Look up one of :data:`SUBMISSIONS` by name."""
    if name not in SUBMISSIONS:
        raise ValueError(f"unknown submission {name!r}; choose from {sorted(SUBMISSIONS)}")
    return SUBMISSIONS[name]
