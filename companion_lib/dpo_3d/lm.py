"""A preference world for a tiny causal transformer whose response space can be enumerated.

Prompts are single tokens; responses are ``length`` tokens over a small response vocabulary, so
:math:`\\pi_\\theta(\\cdot\\mid x)` over all :math:`|V|^{\\text{length}}` responses is computed exactly (with
:func:`companion_lib.tinylm.exact_response_logprobs`). One response token is "gibberish": a response that
contains it is invalid. The true reward is

.. math:: r(x, y) = \\#\\{t: y_t = \\text{target}(x)\\} - 3\\,[\\text{gibberish} \\in y].

This module holds the experiment loops of the chapter's reproduction (Yan et al., Section 4): SFT to a
reference, preference pairs on/off policy (Table 1), DPO and its regularised variants with exact
per-epoch metrics (Figs. 2 and 4), a Bradley-Terry reward model (Fig. 5), and an exact KL-regularised
policy optimisation against it (a stand-in for PPO, Table 2).

Devices: :func:`lm_experiment` runs its transformers on ``device`` (default
:func:`companion_lib.common.device`: the GPU when present, else the CPU); the functions that receive a model
put their inputs where the model is (:func:`~companion_lib.common.module_device`). Every random draw (model
initialisation, preference pairs, minibatch order) is made on the CPU and its result moved, so a run on the
CPU computes exactly the same numbers whether or not a device is named; the metrics come back as numpy arrays.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from ..common.device import device as default_device
from ..common.device import module_device, to_device
from ..tinylm import (LastTokenScorer, all_responses, exact_response_logprobs, gpt2_config, minibatches,
                      response_logprobs, tiny_causal_lm, train_loop)
from .losses import dpo_loss, rm_loss

__all__ = ["PreferenceWorld", "make_world", "peaked_distribution", "make_policy", "fit_reference",
           "exact_logprobs", "policy_metrics", "preference_pairs", "train_dpo_lm",
           "train_reward_model", "exact_kl_policy_optimization", "lm_experiment"]


@dataclass(frozen=True)
class PreferenceWorld:
    """Token layout and true reward of the enumerable preference task."""

    n_prompts: int
    n_tokens: int
    length: int
    targets: tuple[int, ...]          # target response token of each prompt
    gibberish_penalty: float = 3.0
    responses: torch.Tensor = field(repr=False, default=None)  # (N, length) token ids

    @property
    def vocab(self) -> list[int]:
        """Response token ids (after the prompt tokens)."""
        return list(range(self.n_prompts, self.n_prompts + self.n_tokens))

    @property
    def gibberish(self) -> int:
        return self.n_prompts + self.n_tokens - 1

    @property
    def vocab_size(self) -> int:
        return self.n_prompts + self.n_tokens

    @property
    def prompts(self) -> torch.Tensor:
        return torch.arange(self.n_prompts).unsqueeze(1)

    def invalid(self) -> torch.Tensor:
        """(N,) bool: responses that contain the gibberish token."""
        return (self.responses == self.gibberish).any(1)

    def reward_table(self) -> torch.Tensor:
        """(P, N) true reward of every response for every prompt."""
        hits = (self.responses.unsqueeze(0) == torch.tensor(self.targets).view(-1, 1, 1)).sum(-1).float()
        return hits - self.gibberish_penalty * self.invalid().float()


def make_world(n_prompts: int = 4, n_tokens: int = 6, length: int = 3, seed: int = 0) -> PreferenceWorld:
    """A world with random (seeded) target tokens; the last response token is gibberish."""
    for name, v, lo in (("n_prompts", n_prompts, 1), ("n_tokens", n_tokens, 3), ("length", length, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")
    g = torch.Generator().manual_seed(seed)
    targets = tuple(int(n_prompts + t) for t in torch.randint(0, n_tokens - 1, (n_prompts,), generator=g))
    vocab = list(range(n_prompts, n_prompts + n_tokens))
    return PreferenceWorld(n_prompts, n_tokens, length, targets, responses=all_responses(vocab, length))


def peaked_distribution(world: PreferenceWorld, seed: int, scale: float = 2.0,
                        invalid_logit: float = -6.0) -> torch.Tensor:
    """(P, N) random peaked distribution over responses (logits ``scale``*N(0,1)); invalid ones get ``invalid_logit`` less."""
    g = torch.Generator().manual_seed(seed)
    logits = scale * torch.randn(world.n_prompts, len(world.responses), generator=g)
    logits = logits + invalid_logit * world.invalid().float()
    return torch.softmax(logits, -1)


def make_policy(world: PreferenceWorld, seed: int, n_embd: int = 32, n_layer: int = 2, n_head: int = 2,
                device=None) -> nn.Module:
    """A tiny ``GPT2LMHeadModel`` for the world's vocabulary (no key-value cache: every forward is a full one).

    ``device`` (default: the CPU) is where the model is put after its weights are drawn on the CPU, so the same
    ``seed`` gives the same weights on every device."""
    cfg = gpt2_config(world.vocab_size, n_positions=1 + world.length, n_embd=n_embd, n_layer=n_layer, n_head=n_head)
    model = tiny_causal_lm(cfg, seed=seed)
    model.config.use_cache = False    # nothing here reuses a key-value cache: the same numbers, a faster forward
    return model if device is None else model.to(device)


def exact_logprobs(model: nn.Module, world: PreferenceWorld) -> torch.Tensor:
    """(P, N) exact :math:`\\log\\pi(y\\mid x)` of every response, softmax restricted to the response vocabulary.

    Computed on the model's device (the result stays there)."""
    return exact_response_logprobs(model, world.prompts.to(module_device(model)), world.vocab, world.length)


def fit_reference(world: PreferenceWorld, target: torch.Tensor, seed: int, steps: int = 200,
                  lr: float = 1e-2, device=None, **model_kw) -> nn.Module:
    """SFT with the exact cross-entropy :math:`-\\sum_y q(y\\mid x)\\log\\pi_\\theta(y\\mid x)` to ``target`` (P, N).

    ``device`` (default: the CPU) is where the model trains (:func:`make_policy`); the returned model is there."""
    model = make_policy(world, seed, device=device, **model_kw)
    target = target.to(module_device(model))

    def loss_fn(m, _):
        return -(target * exact_logprobs(m, world)).sum(-1).mean()

    train_loop(model, loss_fn, range(steps), lr=lr)
    return model


def policy_metrics(logp: torch.Tensor, ref_logp: torch.Tensor, world: PreferenceWorld) -> dict[str, float]:
    """Expected true reward, mass on invalid responses and KL(pi || pi_ref), averaged over prompts.

    Computed on the device of ``logp`` (the world's tables are moved there); returns Python floats."""
    p = logp.exp()
    return {"reward": float((p * world.reward_table().to(p.device)).sum(-1).mean()),
            "invalid_mass": float(p[:, world.invalid().to(p.device)].sum(-1).mean()),
            "kl": float((p * (logp - ref_logp)).sum(-1).mean())}


def preference_pairs(world: PreferenceWorld, chosen_source: torch.Tensor, rejected_source: torch.Tensor,
                     n_per_prompt: int, k: int = 4, seed: int = 0) -> dict[str, torch.Tensor]:
    """Pairs (prompt, chosen, rejected): best of ``k`` draws from ``chosen_source``, worst of ``k`` from ``rejected_source``.

    Sources are (P, N) response distributions (the policy itself = on-policy, another model = off-policy).
    Only pairs whose chosen response has a strictly higher true reward are kept. Indices refer to
    ``world.responses``. The draws are made on the CPU (with a CPU generator), whatever device the sources
    are on, and the pairs are CPU tensors.
    """
    chosen_source, rejected_source = chosen_source.cpu(), rejected_source.cpu()
    if chosen_source.shape != rejected_source.shape or chosen_source.shape != (world.n_prompts, len(world.responses)):
        raise ValueError("chosen_source and rejected_source must both have shape (n_prompts, n_responses)")
    g = torch.Generator().manual_seed(seed)
    reward = world.reward_table()
    out = {"prompt": [], "chosen": [], "rejected": []}
    for p in range(world.n_prompts):
        kept = 0
        for _ in range(50):
            m = 4 * n_per_prompt
            c = torch.multinomial(chosen_source[p], m * k, replacement=True, generator=g).view(m, k)
            r = torch.multinomial(rejected_source[p], m * k, replacement=True, generator=g).view(m, k)
            best = c.gather(1, reward[p, c].argmax(1, keepdim=True)).squeeze(1)
            worst = r.gather(1, reward[p, r].argmin(1, keepdim=True)).squeeze(1)
            ok = reward[p, best] > reward[p, worst]
            take = min(int(ok.sum()), n_per_prompt - kept)
            out["prompt"].append(torch.full((take,), p))
            out["chosen"].append(best[ok][:take])
            out["rejected"].append(worst[ok][:take])
            kept += take
            if kept == n_per_prompt:
                break
        else:
            raise RuntimeError(f"could not find {n_per_prompt} pairs with a reward gap for prompt {p}")
    return {key: torch.cat(v) for key, v in out.items()}


def _pair_logps(model, world, pairs, idx, responses=None):
    """Sequence log-likelihoods of the chosen and rejected responses of pairs ``idx`` (``responses``: the
    world's responses, already on the device of ``pairs``; default ``world.responses``)."""
    responses = world.responses if responses is None else responses
    prompts = pairs["prompt"][idx].unsqueeze(1)
    both = torch.cat([responses[pairs["chosen"][idx]], responses[pairs["rejected"][idx]]])
    lp = response_logprobs(model, torch.cat([prompts, prompts]), both, allowed_tokens=world.vocab)
    return lp.chunk(2)


def train_dpo_lm(reference: nn.Module, world: PreferenceWorld, pairs: dict[str, torch.Tensor],
                 beta: float = 0.1, beta_rejected: float | None = None, sft_lambda: float = 0.0,
                 epochs: int = 20, batch_size: int = 32, lr: float = 1e-3, seed: int = 0,
                 eval_pairs: dict[str, torch.Tensor] | None = None, curves: bool = True) -> dict[str, np.ndarray]:
    """DPO / Flex-DPO / SFT-augmented DPO from ``reference``, with exact metrics after every epoch.

    Returns per-epoch arrays (index 0 = before training): ``logp_chosen``, ``logp_rejected`` (means over
    the training pairs), ``reward`` (expected true reward), ``invalid_mass``, ``kl``, ``unseen_mass`` (mass on responses that
    appear in no training pair of their prompt) and, with
    ``eval_pairs``, ``accuracy`` (share of held-out pairs with implicit-reward margin h > 0).
    With ``curves=False`` the metrics are recorded before and after training only (arrays of length 2;
    the training itself is the same). ``sft_lambda`` weighs the NLL per chosen token (TRL's convention,
    :func:`~companion_lib.dpo_3d.losses.dpo_loss`). The policy trains on the device of ``reference``, where
    the pairs and each minibatch (drawn on the CPU) are moved.
    """
    policy = copy.deepcopy(reference)
    dev = module_device(policy)
    pairs, eval_pairs = to_device(pairs, dev), to_device(eval_pairs, dev)
    responses = world.responses.to(dev)
    with torch.no_grad():
        ref_table = exact_logprobs(reference, world)
    rows = {"p": pairs["prompt"], "c": pairs["chosen"], "r": pairs["rejected"]}
    ref_c, ref_r = ref_table[rows["p"], rows["c"]], ref_table[rows["p"], rows["r"]]
    seen = torch.zeros(world.n_prompts, len(world.responses), dtype=torch.bool, device=dev)
    seen[rows["p"], rows["c"]] = True
    seen[rows["p"], rows["r"]] = True
    hist: dict[str, list[float]] = {k: [] for k in ("logp_chosen", "logp_rejected", "reward", "invalid_mass",
                                                    "kl", "unseen_mass")}
    if eval_pairs is not None:
        hist["accuracy"] = []

    def record():
        with torch.no_grad():
            table = exact_logprobs(policy, world)
        hist["logp_chosen"].append(float(table[rows["p"], rows["c"]].mean()))
        hist["logp_rejected"].append(float(table[rows["p"], rows["r"]].mean()))
        for key, v in policy_metrics(table, ref_table, world).items():
            hist[key].append(v)
        hist["unseen_mass"].append(float((table.exp() * ~seen).sum(-1).mean()))
        if eval_pairs is not None:
            p, c, r = eval_pairs["prompt"], eval_pairs["chosen"], eval_pairs["rejected"]
            h = dpo_loss(table[p, c], table[p, r], ref_table[p, c], ref_table[p, r], beta, beta_rejected).margin
            hist["accuracy"].append(float((h > 0).float().mean()))

    def loss_fn(model, idx):
        idx = idx.to(dev)
        lp_c, lp_r = _pair_logps(model, world, pairs, idx, responses)
        return dpo_loss(lp_c, lp_r, ref_c[idx], ref_r[idx], beta, beta_rejected, sft_lambda,
                        chosen_tokens=world.length).loss

    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(policy.parameters(), lr=lr, foreach=True)
    record()
    for epoch in range(epochs):
        train_loop(policy, loss_fn, minibatches(len(rows["p"]), batch_size, generator=g), optimizer=opt)
        if curves or epoch == epochs - 1:
            record()
    return {k: np.asarray(v) for k, v in hist.items()}


def train_reward_model(sft_model: nn.Module, world: PreferenceWorld, pairs: dict[str, torch.Tensor],
                       eval_pairs: dict[str, torch.Tensor], epochs: int = 20, batch_size: int = 32,
                       lr: float = 1e-3, seed: int = 0) -> tuple[LastTokenScorer, np.ndarray]:
    """Bradley-Terry reward model on the SFT trunk; returns it and held-out accuracy per epoch (index 0 = start).

    Accuracy is the share of held-out pairs the model ranks correctly (ties count one half). The reward model
    trains on the device of ``sft_model``, where the sequences and each minibatch (drawn on the CPU) are moved.
    """
    dev = module_device(sft_model)
    rm = LastTokenScorer(sft_model).to(dev)     # the new head is made on the CPU (same draws), then moved

    def seqs(prs, key):
        return torch.cat([prs["prompt"].unsqueeze(1), world.responses[prs[key]]], dim=1).to(dev)

    train_c, train_r = seqs(pairs, "chosen"), seqs(pairs, "rejected")
    eval_c, eval_r = seqs(eval_pairs, "chosen"), seqs(eval_pairs, "rejected")

    def accuracy():
        with torch.no_grad():
            r_c, r_r = rm(torch.cat([eval_c, eval_r])).chunk(2)
            diff = r_c - r_r
            return float(((diff > 0).float() + 0.5 * (diff == 0).float()).mean())   # ties count half

    def loss_fn(model, idx):
        idx = idx.to(dev)
        r_c, r_r = model(torch.cat([train_c[idx], train_r[idx]])).chunk(2)   # one forward for both
        return rm_loss(r_c, r_r)

    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(rm.parameters(), lr=lr, foreach=True)
    acc = [accuracy()]
    for _ in range(epochs):
        train_loop(rm, loss_fn, minibatches(len(train_c), batch_size, generator=g), optimizer=opt)
        acc.append(accuracy())
    return rm, np.asarray(acc)


def exact_kl_policy_optimization(reference: nn.Module, world: PreferenceWorld, reward: torch.Tensor,
                                 beta: float = 0.1, steps: int = 100, lr: float = 1e-3) -> tuple[nn.Module, dict[str, np.ndarray]]:
    """RLHF without sampling: gradient ascent on :math:`\\sum_y\\pi_\\theta(y|x)\\hat r(x,y) - \\beta\\,\\mathrm{KL}(\\pi_\\theta\\|\\pi_{ref})`.

    ``reward`` is the (P, N) table of a (frozen) reward model's scores. Because the response space is
    enumerated, the objective and its gradient are exact: the stand-in for PPO at this scale. Returns the
    policy and per-step metrics (:func:`policy_metrics`, index 0 = start). The policy trains on the device of
    ``reference``, where ``reward`` is moved.
    """
    if not beta > 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    if reward.shape != (world.n_prompts, len(world.responses)):
        raise ValueError(f"reward must have shape {(world.n_prompts, len(world.responses))}, got {tuple(reward.shape)}")
    policy = copy.deepcopy(reference)
    with torch.no_grad():
        ref_table = exact_logprobs(reference, world)
    reward = reward.detach().to(module_device(policy))
    hist: dict[str, list[float]] = {"reward": [], "invalid_mass": [], "kl": []}

    def loss_fn(model, _):
        logp = exact_logprobs(model, world)
        p = logp.exp()
        with torch.no_grad():
            for k, v in policy_metrics(logp, ref_table, world).items():
                hist[k].append(v)
        return -((p * reward).sum(-1) - beta * (p * (logp - ref_table)).sum(-1)).mean()

    train_loop(policy, loss_fn, range(steps), lr=lr)
    with torch.no_grad():
        for k, v in policy_metrics(exact_logprobs(policy, world), ref_table, world).items():
            hist[k].append(v)
    return policy, {k: np.asarray(v) for k, v in hist.items()}


def lm_experiment(seed: int, n_pairs: int = 32, epochs: int = 20, batch_size: int = 32, lr: float = 1e-3,
                  beta: float = 0.1, beta_sweep: tuple[float, ...] = (0.09, 0.08, 0.06, 0.04),
                  sft_lambda: float = 0.3, ref_steps: int = 200, rlhf_steps: int = 100,
                  rlhf_lr: float = 3e-3, device=None) -> dict[str, dict[str, np.ndarray]]:
    """Every tiny-LM run of the chapter for one seed (the reproduction's Table 1, Figs. 2, 4, 5, Table 2).

    World and target tokens, the SFT reference, the off-policy source ("another model": an independent
    peaked distribution), on-/off-policy pairs, and: DPO in the four scenarios (keys ``S1``..``S4``),
    Flex-DPO with each :math:`\\beta^-` of ``beta_sweep`` on the scenario-1 pairs (``flex<beta>``),
    SFT-augmented DPO (``sft``), a reward model (``rm``: held-out accuracy per epoch) and exact RLHF
    against it (``rlhf``). Held-out pairs come from the same sources as the training pairs. Only ``S1`` keeps
    per-epoch curves (and held-out accuracy); the other runs record their start and end (``curves=False``).
    ``sft_lambda`` is per chosen token (TRL's convention): 0.3 on three-token responses is the research
    plan's 0.1 on the sequence log-likelihood.

    ``device`` (default :func:`companion_lib.common.device`: the GPU when present, else the CPU) is where the
    transformers train and are evaluated; every random draw stays on the CPU, so ``device="cpu"`` gives exactly
    the numbers of a machine without a GPU, and the results are numpy arrays on every device.
    """
    dev = default_device(None if device is None else str(device))
    world = make_world(seed=seed)
    base = peaked_distribution(world, seed=1000 + seed)
    off = peaked_distribution(world, seed=2000 + seed)
    reference = fit_reference(world, base, seed=seed, steps=ref_steps, device=dev)
    with torch.no_grad():
        on = exact_logprobs(reference, world).exp().cpu()       # a source of CPU draws
    sources = {"on": on, "off": off}
    scenarios = {1: ("on", "on"), 2: ("off", "on"), 3: ("on", "off"), 4: ("off", "off")}
    kw = dict(epochs=epochs, batch_size=batch_size, lr=lr, seed=seed)
    out: dict[str, dict[str, np.ndarray]] = {}
    pairs_s1 = eval_s1 = None
    for sc, (c_src, r_src) in scenarios.items():
        pairs = preference_pairs(world, sources[c_src], sources[r_src], n_pairs, seed=seed)
        held_out = preference_pairs(world, sources[c_src], sources[r_src], n_pairs, seed=seed + 10_000)
        out[f"S{sc}"] = train_dpo_lm(reference, world, pairs, beta=beta, eval_pairs=held_out if sc == 1 else None,
                                     curves=sc == 1, **kw)
        if sc == 1:
            pairs_s1, eval_s1 = pairs, held_out
    for b_r in beta_sweep:
        out[f"flex{b_r:g}"] = train_dpo_lm(reference, world, pairs_s1, beta=beta, beta_rejected=b_r, curves=False,
                                           **kw)
    out["sft"] = train_dpo_lm(reference, world, pairs_s1, beta=beta, sft_lambda=sft_lambda, curves=False, **kw)
    rm, acc = train_reward_model(reference, world, pairs_s1, eval_s1, epochs=epochs, batch_size=batch_size,
                                 lr=lr, seed=seed)
    out["rm"] = {"accuracy": acc}
    with torch.no_grad():
        seqs = torch.cat([world.prompts.repeat_interleave(len(world.responses), 0),
                          world.responses.repeat(world.n_prompts, 1)], dim=1)
        reward_hat = rm(seqs.to(dev)).view(world.n_prompts, -1)
    _, out["rlhf"] = exact_kl_policy_optimization(reference, world, reward_hat, beta=beta, steps=rlhf_steps,
                                                  lr=rlhf_lr)
    return out
