"""The paper's toy model (Yan et al., Section 3.2, Figs. 1-3): an MLP policy over a few prompts and ten responses.

Each prompt is a feature vector, each response is one output of a softmax, so :math:`\\pi_\\theta(y\\mid x)` is
exact. Parameters are shared across prompts (the hidden layers), which is what turns DPO's push on
:math:`\\log\\pi^-` into drift of other probabilities. Details the paper does not give (width, learning
rate, pair structure, correlation of the prompt features) are explicit arguments here.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from ..common.device import module_device
from .losses import dpo_loss

__all__ = ["TOY_SCENARIOS", "ToyPolicy", "toy_prompts", "reference_target", "fit_toy_reference",
           "toy_pairs", "run_toy_dpo"]

#: scenario -> (source of the chosen responses, source of the rejected ones); Fig. 3 of the paper.
TOY_SCENARIOS = {1: ("on", "on"), 2: ("off", "on"), 3: ("on", "off"), 4: ("off", "off")}


class ToyPolicy(nn.Module):
    """Three-layer MLP :math:`x\\mapsto\\log\\mathrm{softmax}(W_3\\,\\mathrm{relu}(W_2\\,\\mathrm{relu}(W_1x)))`."""

    def __init__(self, n_features: int, n_responses: int = 10, hidden: int = 64) -> None:
        super().__init__()
        for name, v in (("n_features", n_features), ("n_responses", n_responses), ("hidden", hidden)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        self.net = nn.Sequential(nn.Linear(n_features, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                                 nn.ReLU(), nn.Linear(hidden, n_responses))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.net(x), dim=-1)


def toy_prompts(n_prompts: int = 4, rho: float = 0.5) -> torch.Tensor:
    """Prompt features :math:`x_p=(1-\\rho)e_p+\\rho\\,\\mathbf 1/2`; ``rho=0`` gives the paper's one-hot inputs."""
    if isinstance(n_prompts, bool) or not isinstance(n_prompts, int) or n_prompts < 1:
        raise ValueError(f"n_prompts must be an int >= 1, got {n_prompts!r}")
    if not 0.0 <= rho <= 1.0:
        raise ValueError(f"rho must be in [0, 1], got {rho}")
    return (1 - rho) * torch.eye(n_prompts) + rho * 0.5 * torch.ones(n_prompts, n_prompts)


def reference_target(n_responses: int = 10, on_policy: Sequence[int] = range(5), on_mass: float = 0.95) -> torch.Tensor:
    """SFT target: ``on_mass`` spread evenly over the on-policy responses, the rest over the others."""
    on = sorted(set(on_policy))
    if not on or min(on) < 0 or max(on) >= n_responses or len(on) == n_responses:
        raise ValueError("on_policy must be a non-empty proper subset of range(n_responses)")
    if not 0.0 < on_mass < 1.0:
        raise ValueError(f"on_mass must be in (0, 1), got {on_mass}")
    target = torch.full((n_responses,), (1 - on_mass) / (n_responses - len(on)))
    target[on] = on_mass / len(on)
    return target


def fit_toy_reference(x: torch.Tensor, target: torch.Tensor, hidden: int = 64, steps: int = 300,
                      lr: float = 1e-2, seed: int = 0) -> ToyPolicy:
    """SFT: minimise the cross-entropy to ``target`` for every prompt with Adam; returns the reference policy."""
    if target.ndim != 1 or not torch.isclose(target.sum(), torch.tensor(1.0)):
        raise ValueError("target must be a probability vector")
    torch.manual_seed(seed)
    policy = ToyPolicy(x.shape[1], target.numel(), hidden)
    opt = torch.optim.Adam(policy.parameters(), lr=lr, foreach=True)
    for _ in range(steps):
        loss = -(policy(x) * target).sum(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return policy


def toy_pairs(scenario: int, n_prompts: int = 4, on_pool: Sequence[int] = range(5),
              off_pool: Sequence[int] = range(5, 10)) -> tuple[torch.Tensor, torch.Tensor]:
    """Chosen and rejected response per prompt for one of the four scenarios of Fig. 3.

    Prompt p gets the p-th response of the chosen pool and the (p+1)-th of the rejected pool, so (when the
    pools coincide) the response chosen for prompt p+1 is the one rejected for prompt p: the toy's stand-in
    for tokens shared between chosen and rejected responses.
    """
    if scenario not in TOY_SCENARIOS:
        raise ValueError(f"scenario must be one of {sorted(TOY_SCENARIOS)}, got {scenario!r}")
    pools = {"on": list(on_pool), "off": list(off_pool)}
    src_c, src_r = TOY_SCENARIOS[scenario]
    pc, pr = pools[src_c], pools[src_r]
    chosen = torch.tensor([pc[p % len(pc)] for p in range(n_prompts)])
    rejected = torch.tensor([pr[(p + 1) % len(pr)] for p in range(n_prompts)])
    if (chosen == rejected).any():
        raise ValueError("a prompt got the same chosen and rejected response; use larger pools")
    return chosen, rejected


def run_toy_dpo(references: ToyPolicy | Sequence[ToyPolicy], x: torch.Tensor, chosen: torch.Tensor,
                rejected: torch.Tensor, epochs: int = 500, lr: float = 1e-2, beta: float = 0.1,
                beta_rejected: float | Sequence[float] | None = None,
                sft_lambda: float | Sequence[float] = 0.0) -> dict[str, np.ndarray]:
    """Full-batch DPO for ``epochs`` Adam steps from each reference; returns per-epoch, per-prompt curves.

    Several independent runs (R of them) train at once: ``references`` is one policy or a list of R,
    ``chosen``/``rejected`` are (P,) or (R, P) response indices, and ``beta_rejected``/``sft_lambda`` are
    floats or length-R lists. The runs share nothing (stacked parameters, an element-wise optimiser, a
    summed loss), so the result equals R separate runs, at the cost of about one.

    Returns arrays of shape (R, epochs + 1, P) (epoch 0 = start): ``p_chosen``, ``p_rejected``,
    ``p_unseen`` (all other responses), ``logp_chosen``, ``logp_rejected`` and ``log10_grad_chosen``,
    ``log10_grad_rejected`` (magnitudes of :math:`\\partial\\ell/\\partial\\pi^\\pm` from
    :func:`~companion_lib.dpo_3d.losses.dpo_loss`, in decades), numpy arrays on the CPU. The runs train on the
    device of the references (:func:`~companion_lib.common.module_device`; the CPU as :func:`fit_toy_reference`
    builds them), where ``x`` and the pairs are moved.
    """
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be an int >= 1, got {epochs!r}")
    refs = [references] if isinstance(references, ToyPolicy) else list(references)
    if not refs or not all(isinstance(r, ToyPolicy) for r in refs):
        raise TypeError("references must be a ToyPolicy or a non-empty list of them")
    n_runs, n_prompts = len(refs), x.shape[0]
    dev = module_device(refs[0])
    x = x.to(dev)
    chosen = torch.as_tensor(chosen).long().expand(n_runs, n_prompts).to(dev)
    rejected = torch.as_tensor(rejected).long().expand(n_runs, n_prompts).to(dev)

    def per_run(value, name):
        t = torch.as_tensor(value, dtype=torch.float32).flatten()
        if t.numel() == 1:
            t = t.expand(n_runs)
        if t.numel() != n_runs:
            raise ValueError(f"{name} must be a float or a list of {n_runs} floats")
        return t.view(n_runs, 1).to(dev)

    b_c = per_run(beta, "beta")
    b_r = b_c if beta_rejected is None else per_run(beta_rejected, "beta_rejected")
    lam = per_run(sft_lambda, "sft_lambda")
    params = {k: v.detach().clone().requires_grad_(True)
              for k, v in torch.func.stack_module_state(refs)[0].items()}
    base = copy.deepcopy(refs[0]).to("meta")

    def forward(p):
        return torch.func.functional_call(base, p, (x,))

    batched = torch.vmap(forward)
    with torch.no_grad():
        ref_lp = batched(params)
    ref_c, ref_r = ref_lp.gather(-1, chosen[..., None])[..., 0], ref_lp.gather(-1, rejected[..., None])[..., 0]
    opt = torch.optim.Adam(params.values(), lr=lr, foreach=True)
    keys = ["p_chosen", "p_rejected", "p_unseen", "logp_chosen", "logp_rejected",
            "log10_grad_chosen", "log10_grad_rejected"]
    hist: dict[str, list[np.ndarray]] = {k: [] for k in keys}
    ln10 = float(np.log(10.0))
    for epoch in range(epochs + 1):
        lp = batched(params)
        lp_c, lp_r = lp.gather(-1, chosen[..., None])[..., 0], lp.gather(-1, rejected[..., None])[..., 0]
        out = dpo_loss(lp_c, lp_r, ref_c, ref_r, b_c, b_r, lam)
        with torch.no_grad():
            pc, pr = lp_c.exp(), lp_r.exp()
            vals = (pc, pr, 1 - pc - pr, lp_c, lp_r, out.log_grad_chosen / ln10, out.log_grad_rejected / ln10)
            for k, v in zip(keys, vals):
                hist[k].append(v.double().cpu().numpy())
        if epoch == epochs:
            break
        opt.zero_grad()
        (out.loss * n_runs).backward()      # sum over runs of each run's mean loss
        opt.step()
    return {k: np.stack(v, axis=1) for k, v in hist.items()}
