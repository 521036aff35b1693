"""The DPO loss with separate temperatures (Flex-DPO), its 3D diagnostics, and the Bradley-Terry loss.

Notation of Yan et al. (ICLR 2025), Section 3: :math:`\\pi^\\pm=\\pi_\\theta(y^\\pm\\mid x)`, reference values
:math:`\\pi^\\pm_{\\mathrm{ref}}`, margin

.. math:: h = \\beta^+\\log\\frac{\\pi^+}{\\pi^+_{\\mathrm{ref}}} - \\beta^-\\log\\frac{\\pi^-}{\\pi^-_{\\mathrm{ref}}},
   \\qquad \\ell = -\\log\\sigma(h) \\; [+\\,\\lambda(-\\log\\pi^+)/|y^+|].

The optional SFT term is the negative log-likelihood of the chosen response *per token* (:math:`|y^+|` tokens),
pooled over the batch: the convention of TRL's ``DPOTrainer`` (``loss_type=["sigmoid", "sft"]``, weight
:math:`\\lambda`, formerly ``rpo_alpha``), so that :math:`\\lambda` means the same thing here and there.

With :math:`s=\\sigma(-h)` the probability-space gradients are
:math:`\\partial\\ell/\\partial\\pi^+=-\\beta^+ s/\\pi^+` and :math:`\\partial\\ell/\\partial\\pi^-=\\beta^- s/\\pi^-`
(their ratio is Corollary 1). :math:`\\pi^-` underflows in float32 long before training ends, so the
magnitudes are returned as logarithms, computed from log-probabilities only.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

__all__ = ["DPOOutput", "dpo_loss", "rm_loss", "prob_space_gradients"]


class DPOOutput(NamedTuple):
    """What :func:`dpo_loss` returns; every field except ``loss`` has one entry per pair."""

    loss: torch.Tensor               #: mean loss over the batch (scalar, differentiable)
    margin: torch.Tensor             #: h, the argument of the sigmoid
    log_grad_chosen: torch.Tensor    #: log |dl/dpi+| = log beta+ + log sigma(-h) - log pi+
    log_grad_rejected: torch.Tensor  #: log |dl/dpi-| = log beta- + log sigma(-h) - log pi-
    chosen_reward: torch.Tensor      #: beta+ (log pi+ - log pi+_ref), DPO's implicit reward
    rejected_reward: torch.Tensor    #: beta- (log pi- - log pi-_ref)


def _check_logps(**tensors: torch.Tensor) -> torch.Tensor:
    shape = None
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got {t.dtype}")
        if shape is None:
            shape = t.shape
        elif t.shape != shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {tuple(shape)} like the others")
        if torch.isnan(t).any():
            raise ValueError(f"{name} contains NaN")
        if (t > 1e-6).any():
            raise ValueError(f"{name} must hold log-probabilities (<= 0)")
    return shape


def _check_beta(value, name: str, strict: bool = True):
    """A positive float, or a tensor of them (one per pair, broadcast against the batch)."""
    if isinstance(value, torch.Tensor):
        ok = (value > 0).all() if strict else (value >= 0).all()
        if not value.is_floating_point() or not bool(ok):
            raise ValueError(f"{name} must hold floats {'>' if strict else '>='} 0")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a float or a tensor, got {type(value).__name__}")
    if not (value > 0 if strict else value >= 0):
        raise ValueError(f"{name} must be {'>' if strict else '>='} 0, got {value}")
    return float(value)


def _check_tokens(value, shape) -> float:
    """The mean number of chosen tokens per pair (an int >= 1, or a (B,) tensor of them)."""
    if isinstance(value, torch.Tensor):
        if value.shape != shape or bool((value < 1).any()):
            raise ValueError(f"chosen_tokens must be an int >= 1 or a tensor of shape {tuple(shape)} of them")
        return float(value.float().mean())
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"chosen_tokens must be an int >= 1 or a tensor of them, got {value!r}")
    return value


def dpo_loss(logp_chosen: torch.Tensor, logp_rejected: torch.Tensor, ref_chosen: torch.Tensor,
             ref_rejected: torch.Tensor, beta_chosen: float = 0.1, beta_rejected: float | None = None,
             sft_lambda: float = 0.0, chosen_tokens=1) -> DPOOutput:
    """DPO (Rafailov et al., 2023), Flex-DPO and SFT-augmented DPO (Yan et al., Sections 3.3 and 4.3).

    Parameters
    ----------
    logp_chosen, logp_rejected:
        :math:`\\log\\pi_\\theta(y^\\pm\\mid x)` per pair (sequence log-likelihoods), shape (B,).
    ref_chosen, ref_rejected:
        The same under the frozen reference policy.
    beta_chosen, beta_rejected:
        :math:`\\beta^+` and :math:`\\beta^-`; ``beta_rejected=None`` means :math:`\\beta^-=\\beta^+` (vanilla DPO).
        Floats, or tensors broadcast against the pairs (to train several variants in one batch).
    sft_lambda:
        Weight :math:`\\lambda\\ge0` of the NLL-on-chosen term (RPO / SFT-augmented DPO), a float or a tensor
        like the betas. The term is :math:`-\\lambda\\sum_i\\log\\pi^+_i/\\sum_i|y^+_i|`, the mean NLL per chosen
        token pooled over the batch, as TRL's ``"sft"`` loss computes it.
    chosen_tokens:
        Number of tokens :math:`|y^+|` of each chosen response: an int (all the same; 1 when a response is a
        single output, as in the toy model) or a tensor of shape (B,).

    Returns
    -------
    DPOOutput
        The mean loss and per-pair diagnostics (margin, log gradient magnitudes, implicit rewards).
    """
    _check_logps(logp_chosen=logp_chosen, logp_rejected=logp_rejected, ref_chosen=ref_chosen,
                 ref_rejected=ref_rejected)
    b_c = _check_beta(beta_chosen, "beta_chosen")
    b_r = b_c if beta_rejected is None else _check_beta(beta_rejected, "beta_rejected")
    lam = _check_beta(sft_lambda, "sft_lambda", strict=False)
    n_tok = _check_tokens(chosen_tokens, logp_chosen.shape)
    chosen_reward = b_c * (logp_chosen - ref_chosen)
    rejected_reward = b_r * (logp_rejected - ref_rejected)
    margin = chosen_reward - rejected_reward
    losses = -F.logsigmoid(margin)
    if isinstance(lam, torch.Tensor) or lam:
        losses = losses - lam * logp_chosen / n_tok       # mean over pairs = pooled per-token NLL
    with torch.no_grad():
        log_s = F.logsigmoid(-margin)                       # log sigma(-h), exact in log space
        log_grad_chosen = torch.log(torch.as_tensor(b_c)) + log_s - logp_chosen
        log_grad_rejected = torch.log(torch.as_tensor(b_r)) + log_s - logp_rejected
    return DPOOutput(losses.mean(), margin.detach(), log_grad_chosen, log_grad_rejected,
                     chosen_reward.detach(), rejected_reward.detach())


def rm_loss(reward_chosen: torch.Tensor, reward_rejected: torch.Tensor) -> torch.Tensor:
    """Bradley-Terry reward-model loss :math:`-\\log\\sigma(r^+-r^-)`, averaged (Yan et al., Section 3.4).

    Its gradients are :math:`\\mp\\sigma(r^- - r^+)`: equal and opposite, bounded by 1.
    """
    for name, t in (("reward_chosen", reward_chosen), ("reward_rejected", reward_rejected)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point torch.Tensor")
        if torch.isnan(t).any():
            raise ValueError(f"{name} contains NaN")
    if reward_chosen.shape != reward_rejected.shape:
        raise ValueError(f"reward_chosen {tuple(reward_chosen.shape)} and reward_rejected "
                         f"{tuple(reward_rejected.shape)} must have the same shape")
    return -F.logsigmoid(reward_chosen - reward_rejected).mean()


def prob_space_gradients(pi_chosen, pi_rejected, ref_chosen, ref_rejected, beta_chosen: float = 0.1,
                         beta_rejected: float | None = None):
    """Closed-form :math:`(\\partial\\ell/\\partial\\pi^+, \\partial\\ell/\\partial\\pi^-)` of the Flex-DPO loss (Yan et al., Eq. of Section 3.1).

    Works on floats, numpy arrays or tensors of probabilities (not logs):
    :math:`\\partial\\ell/\\partial\\pi^+ = -\\beta^+ s/\\pi^+`, :math:`\\partial\\ell/\\partial\\pi^- = \\beta^- s/\\pi^-`
    with :math:`s = 1/(1 + (\\pi^+/\\pi^+_{ref})^{\\beta^+}(\\pi^-_{ref}/\\pi^-)^{\\beta^-})`.
    """
    b_c = _check_beta(beta_chosen, "beta_chosen")
    b_r = b_c if beta_rejected is None else _check_beta(beta_rejected, "beta_rejected")
    odds = (pi_chosen / ref_chosen) ** b_c * (ref_rejected / pi_rejected) ** b_r   # exp(h)
    s = 1.0 / (1.0 + odds)
    return -b_c * s / pi_chosen, b_r * s / pi_rejected
