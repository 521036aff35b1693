r"""Infomorphic layers trained by local PID goals, on scikit-learn's digits, and the baselines.

A hidden neuron $j$ reduces each input class to a scalar, $F_j=w^F_j\cdot x+b^F_j$,
$C_j=w^C_j\cdot y_{1hot}+b^C_j$, $L_j=w^L_j\cdot s^{(t-1)}+b^L_j$ (no self-connection), fires
$Y_j=1$ with probability $\theta_j=\sigma(A(F_j,C_j,L_j))$, and maximises its own goal
$G_j=\sum_\alpha\gamma_\alpha\Pi_\alpha+\gamma_{res}H_{res}$, estimated from a soft histogram of the batch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import nn

from ..common.device import module_device, resolve_device
from ..common.replicates import mean_interval
from .pid import atom_labels, pid_from_joint

# The paper's goals (official configs), by atom label; every other gamma is 0.
GOALS = {
    "trivariate heuristic": {"{F}{C}": 1.0},                     # naive.yaml: encode what F shares with the label
    "trivariate modified": {"{F}{C}{L}": 0.33, "{F}{C}": 1.0, "{F}{L}": -1.0, "{FC}{FL}": -1.0},
    "context heuristic": {"{F}{C}": 1.0},                        # bivariate (F, C)
    "unique F": {"{F}": 1.0},                                    # no redundancy with the label
    "output": {"{F}": -0.2, "{C}": 0.1, "{F}{C}": 1.0, "{FC}": 0.1},
    # opt_1_100_tpe.yaml: the paper's Optuna-optimised goal (MNIST, N = 100), the one its sensitivity
    # figure perturbs; rounded to three decimals
    "trivariate optimised": {"{F}{C}{L}": 0.331, "{F}{C}": 0.978, "{F}{L}": -0.994, "{C}{L}": 0.402,
                             "{F}{CL}": 0.243, "{C}{FL}": 0.626, "{L}{FC}": 0.471, "{F}": 0.021,
                             "{C}": 0.061, "{L}": -0.947, "{FC}{FL}{CL}": -0.020, "{FC}{FL}": -0.968,
                             "{FC}{CL}": -0.692, "{FL}{CL}": 0.427, "{FC}": 0.974, "{FL}": 0.737,
                             "{CL}": -0.122, "{FCL}": -0.215, "H_res": 0.035},
}
# The perturbations of the optimised goal that cost the most accuracy in the paper's sensitivity
# figure (research note): (atom, "zero" or an added amount)
SENSITIVE_PERTURBATIONS = (("{F}", 0.1), ("{FC}{FL}", "zero"), ("{F}{L}", "zero"), ("{F}{C}{L}", "zero"),
                           ("H_res", 0.1))


def perturb_goal(goal: dict, atom: str, change) -> dict:
    """A copy of ``goal`` with ``atom`` set to zero (``change="zero"``) or shifted by ``change``."""
    if not isinstance(goal, dict):
        raise TypeError(f"goal must be a dict {{atom label: gamma}}, got {type(goal).__name__}")
    out = dict(goal)
    if change == "zero":
        out.pop(atom, None)
    elif isinstance(change, (int, float)) and not isinstance(change, bool):
        out[atom] = out.get(atom, 0.0) + float(change)
    else:
        raise ValueError(f"change must be 'zero' or a number, got {change!r}")
    return out
HIDDEN_KINDS = ("trivariate", "context", "lateral", "random")


def goal_vector(goal: dict, n_sources: int) -> torch.Tensor:
    """The gamma vector (atoms in :func:`atom_labels` order, then H_res) of a goal ``{label: gamma}``."""
    labels = atom_labels(n_sources) + ("H_res",)
    if not isinstance(goal, dict):
        raise TypeError(f"goal must be a dict {{atom label: gamma}}, got {type(goal).__name__}")
    vec = torch.zeros(len(labels))
    for key, value in goal.items():
        if key not in labels:
            raise ValueError(f"goal names atom {key!r}, which does not exist for {n_sources} sources; "
                             f"atoms are {labels}")
        vec[labels.index(key)] = float(value)
    return vec


def _bin(x: torch.Tensor, n_bins: int) -> torch.Tensor:
    """Adaptive symmetric binning: divide by the batch max |x| per neuron, cut [-1, 1] into equal bins."""
    scale = x.abs().amax(dim=0, keepdim=True).clamp_min(1e-12)
    return ((x / scale + 1) / 2 * n_bins).floor().clamp(0, n_bins - 1).long()


def soft_joint(sources: list, theta: torch.Tensor, n_bins) -> torch.Tensor:
    r"""The differentiable joint pmf $\hat p(s_1,\dots,s_n,y)$ per neuron, shape ``[N, b, ..., b, 2]``.

    ``sources`` are ``[B, N]`` tensors (binned without gradient), ``theta`` ``[B, N]`` is $P(Y=1)$:
    $\hat p(s,y)=\frac1B\sum_b[\mathrm{bin}(s_b)=s]\,\theta_b(y)$, so gradients flow through $\theta$ only.
    """
    bins = [n_bins] * len(sources) if isinstance(n_bins, (int, np.integer)) else list(n_bins)
    if len(bins) != len(sources):
        raise ValueError(f"n_bins must be an int or one count per source, got {n_bins!r}")
    if any(int(b) < 1 for b in bins):
        raise ValueError(f"n_bins must be positive, got {n_bins!r}")
    if theta.ndim != 2 or any(s.shape != theta.shape for s in sources):
        raise ValueError("sources and theta must all have the same shape [batch, neurons]")
    B, N = theta.shape
    with torch.no_grad():
        idx = torch.zeros(B, N, dtype=torch.long, device=theta.device)
        for s, b in zip(sources, bins):
            idx = idx * int(b) + _bin(s, int(b))
    cells = int(np.prod(bins)) * 2
    w = torch.stack([1 - theta, theta], dim=-1).reshape(B, N * 2).T       # [N*2, B]
    flat_idx = (idx * 2).T.unsqueeze(1) + torch.arange(2, device=theta.device).view(1, 2, 1)  # [N, 2, B]
    P = torch.zeros(N, cells, dtype=theta.dtype, device=theta.device)
    P = P.scatter_add(1, flat_idx.reshape(N, 2 * B), w.reshape(N, 2 * B))
    return (P / B).reshape(N, *[int(b) for b in bins], 2)


@dataclass(frozen=True)
class TrainConfig:
    """Book-scale settings (the paper's MNIST values in comments)."""
    n_hidden: int = 30          # paper: 10 ... 2000
    hidden: str = "trivariate"  # trivariate (F, C, L), context (F, C), lateral (F, L), random (frozen projection)
    goal: object = "trivariate heuristic"   # a name in GOALS, or a dict {atom label: gamma}
    bins_hidden: int = 5        # paper: 20 fixed bins on [-20, 20]
    bins_output: int = 10       # paper: 20 adaptive bins
    batch: int = 256            # paper: 1024
    epochs: int = 30            # paper: up to 100
    lr_hidden: float = 0.01     # paper: 0.002
    lr_output: float = 0.015    # paper: 0.003
    wd_hidden: float = 3.5e-4
    wd_output: float = 1.5e-4
    alpha: float = 0.1          # trivariate activation: alpha_1 = alpha_2
    beta: float = 2.0
    k1: float = 0.9             # bivariate activation
    k2: float = 2.0
    test_passes: int = 5        # stochastic test passes averaged


def _uniform(*shape, fan_in: int) -> nn.Parameter:
    """torch's default ``nn.Linear`` initialisation, U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = 1 / np.sqrt(fan_in)
    return nn.Parameter(torch.empty(*shape).uniform_(-bound, bound))


def _uniform_like(t: torch.Tensor) -> torch.Tensor:
    """U(0, 1) draws shaped like ``t`` from torch's CPU generator, on ``t``'s device: a model on a GPU
    consumes the CPU's random stream as a CPU run does (on the CPU this is ``torch.rand_like(t)``)."""
    if t.device.type == "cpu":
        return torch.rand_like(t)
    return torch.rand_like(t, device="cpu").to(t.device)


def _sample(theta: torch.Tensor) -> torch.Tensor:
    """Bernoulli(theta) samples in {0, 1}, without gradient (a uniform draw below theta)."""
    with torch.no_grad():
        return (_uniform_like(theta) < theta).to(theta.dtype)


class SurrogateBernoulli(torch.autograd.Function):
    r"""A stochastic binary unit with a sigmoid surrogate gradient (the paper's backprop baseline).

    Forward: a sample $b\sim\mathrm{Bernoulli}(\sigma(a))$ in $\{0, 1\}$ from the drive $a$. Backward: the
    sample is treated as if it were $\sigma(a)$, so $\partial b/\partial a := \sigma(a)(1-\sigma(a))$
    (the official ``ProbabilisticSigmoidFunction``).
    """

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        with torch.no_grad():
            return (_uniform_like(a) < torch.sigmoid(a)).to(a.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        (a,) = ctx.saved_tensors
        sig = torch.sigmoid(a)
        return grad_output * sig * (1 - sig)


class InfoNet(nn.Module):
    """A hidden infomorphic layer (with lateral recurrence) and an infomorphic output layer.

    ``n_models`` independent networks are held side by side (a leading model axis on every weight) and
    trained in one pass: their neurons never see each other, each has its own goal, and batching them
    only saves time. Sources and outputs are ``[batch, models, neurons]``.
    """

    def __init__(self, n_in: int, n_classes: int, cfg: TrainConfig, n_models: int = 1) -> None:
        super().__init__()
        if cfg.hidden not in HIDDEN_KINDS:
            raise ValueError(f"hidden must be one of {HIDDEN_KINDS}, got {cfg.hidden!r}")
        if int(cfg.n_hidden) < 1:
            raise ValueError(f"n_hidden must be positive, got {cfg.n_hidden!r}")
        if cfg.bins_hidden < 1 or cfg.bins_output < 1:
            raise ValueError("bins_hidden and bins_output must be positive")
        if int(n_models) < 1:
            raise ValueError(f"n_models must be positive, got {n_models!r}")
        self.cfg, N, M, K = cfg, int(cfg.n_hidden), int(n_models), int(n_classes)
        self.ff_w, self.ff_b = _uniform(M, N, n_in, fan_in=n_in), _uniform(M, N, fan_in=n_in)
        self.ctx_w, self.ctx_b = _uniform(M, N, K, fan_in=K), _uniform(M, N, fan_in=K)
        self.lat_w, self.lat_b = _uniform(M, N, N, fan_in=N), _uniform(M, N, fan_in=N)
        self.out_w, self.out_b = _uniform(M, K, N, fan_in=N), _uniform(M, K, fan_in=N)
        self.register_buffer("lat_mask", 1 - torch.eye(N))      # no self-connection
        self.n_classes, self.n_models = K, M
        self.hidden_sources = {"trivariate": 3, "context": 2, "lateral": 2, "random": 0}[cfg.hidden]

    # -- activations -------------------------------------------------------------------------
    def activation(self, F, C, L):
        c = self.cfg
        if c.hidden == "trivariate":
            return F * ((1 - 2 * c.alpha) + c.alpha * torch.sigmoid(c.beta * F * C)
                        + c.alpha * torch.sigmoid(c.beta * F * L))
        M = C if c.hidden == "context" else L
        return F * (c.k1 + (1 - c.k1) * 2 * torch.sigmoid(c.k2 * F * M))

    def hidden_forward(self, x, y1hot, surrogate: bool = False):
        """Two lateral passes; returns (sources, theta, sampled outputs in {-1, +1}), each [B, M, N].

        ``x`` is ``[B, d]`` (one batch for every model) or ``[B, M, d]`` (a batch per model), ``y1hot``
        likewise ``[B, K]`` or ``[B, M, K]`` (or None: context 0). With ``surrogate=True`` the samples
        carry the sigmoid surrogate gradient (:class:`SurrogateBernoulli`), for the backprop baseline.
        """
        F = torch.einsum("bd,mnd->bmn" if x.ndim == 2 else "bmd,mnd->bmn", x, self.ff_w) + self.ff_b
        if self.cfg.hidden == "random":
            s = torch.where(F >= 0, 1.0, -1.0)
            return [F], None, s
        zeros = torch.zeros_like(F)
        if y1hot is None:
            C = zeros
        else:
            C = torch.einsum("bk,mnk->bmn" if y1hot.ndim == 2 else "bmk,mnk->bmn", y1hot, self.ctx_w) + self.ctx_b
        lateral = self.cfg.hidden in ("trivariate", "lateral")

        def draw(drive):
            return 2 * (SurrogateBernoulli.apply(drive) if surrogate else _sample(torch.sigmoid(drive))) - 1

        drive = self.activation(F, C, zeros)
        if lateral:
            s1 = draw(drive)
            L = torch.einsum("bmj,mnj->bmn", s1, self.lat_w * self.lat_mask) + self.lat_b
            drive = self.activation(F, C, L)
        else:
            L = zeros
        theta = torch.sigmoid(drive)
        s = draw(drive)
        srcs = {"trivariate": [F, C, L], "context": [F, C], "lateral": [F, L]}[self.cfg.hidden]
        return srcs, theta, s

    def output_drive(self, h):
        """The output neurons' feedforward input, [B, M, K], from hidden outputs h [B, M, N]."""
        return torch.einsum("bmn,mkn->bmk", h, self.out_w) + self.out_b

    def output_theta(self, h):
        return torch.sigmoid(self.output_drive(h))


def load_digits_split(seed: int, test_size: float = 0.3):
    """scikit-learn's digits (8x8), a stratified split, standardised by the global training mean/std."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    X, y = load_digits(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=test_size, stratify=y, random_state=seed)
    mu, sd = Xtr.mean(), Xtr.std()
    return ((Xtr - mu) / sd).astype(np.float32), ytr, ((Xte - mu) / sd).astype(np.float32), yte


def _atoms(sources, theta, bins):
    """PID atoms per neuron, [M * N, atoms + 1], of [B, M, N] sources and theta."""
    flat = [t.reshape(t.shape[0], -1) for t in sources]
    # the source marginal of soft_joint does not depend on theta: no gradient through it
    return pid_from_joint(soft_joint(flat, theta.reshape(theta.shape[0], -1), bins),
                          n_sources=len(sources), validate=False, source_grad=False)


def predict_proba(net: InfoNet, X, passes: int, flip: bool = True) -> np.ndarray:
    """Output theta [B, M, K] averaged over stochastic passes, context 0, inverted neurons flipped.

    ``X`` is ``[B, d]`` or ``[B, M, d]`` (a test set per model). ``flip=False`` keeps the output neurons as
    they are (for the backprop baseline, whose outputs are trained to be the class probabilities). Runs on
    ``net``'s device; returns a CPU array.
    """
    with torch.no_grad():
        x = torch.as_tensor(X).to(module_device(net))
        theta = torch.stack([net.output_theta(net.hidden_forward(x, None)[2]) for _ in range(passes)]).mean(0)
        if flip:
            flip_mask = theta.mean(0) >= 0.5   # PID cannot tell Y from 1 - Y: a neuron may learn the inverse code
            theta = torch.where(flip_mask, 1 - theta, theta)
    return theta.cpu().numpy()


def _goal_dict(goal) -> dict:
    if isinstance(goal, str):
        if goal not in GOALS:
            raise ValueError(f"goal must be one of {tuple(GOALS)} or a dict of gammas, got {goal!r}")
        return GOALS[goal]
    return goal


def _splits(seed, replicates: int, data):
    """Per replicate: (seed, split); a list of seeds gives each replicate its own split."""
    if isinstance(seed, (list, tuple, np.ndarray)):
        seeds = [int(s) for s in seed]
        if not seeds:
            raise ValueError("seed must be an int or a non-empty list of ints")
        if data is not None or int(replicates) != 1:
            raise ValueError("with a list of seeds every replicate draws its own split: pass neither data nor replicates")
        return seeds, [load_digits_split(s) for s in seeds], True
    R = int(replicates)
    if R < 1:
        raise ValueError(f"replicates must be positive, got {replicates!r}")
    split = data if data is not None else load_digits_split(int(seed))
    return [int(seed)] * R, [split] * R, False


def _stack(splits):
    """Stack the replicates' splits: Xtr [R, n, d], ytr [R, n], Xte [n_te, R, d], yte [n_te, R]."""
    sizes = {(len(s[0]), len(s[2])) for s in splits}
    if len(sizes) != 1:
        raise ValueError("the replicates' splits must have equal sizes")
    Xtr = np.stack([s[0] for s in splits]); ytr = np.stack([s[1] for s in splits])
    Xte = np.stack([s[2] for s in splits], axis=1); yte = np.stack([s[3] for s in splits], axis=1)
    return Xtr, ytr, Xte, yte


def _init_replicates(net: InfoNet, seeds, own: bool, n_in: int, K: int, cfg: TrainConfig, G: int) -> None:
    """Model ``g * R + r`` starts from replicate ``r``'s initial weights (own seed when ``own``)."""
    R = len(seeds)
    with torch.no_grad():
        if own:
            for r, sd in enumerate(seeds):
                torch.manual_seed(sd)
                one = InfoNet(n_in, K, cfg, n_models=1)
                for p, q in zip(net.parameters(), one.parameters()):
                    p[r].copy_(q[0])
        for p in net.parameters():
            p.copy_(p[:R].repeat(G, *([1] * (p.ndim - 1))))


def _batches(seeds, own: bool, n: int, batch: int):
    """One epoch's mini-batches, [steps] of index arrays [B, R] (each replicate its own order when ``own``)."""
    def perms(rngs):
        if own:
            return np.stack([rng.permutation(n) for rng in rngs], axis=1)
        p = rngs[0].permutation(n)
        return np.repeat(p[:, None], len(seeds), axis=1)
    return perms


def run_models(cfg: TrainConfig, seed, goals=None, replicates: int = 1, data=None, device=None) -> dict:
    r"""Train ``len(goals) * R`` networks side by side, by local goals only.

    ``seed`` is an int (``R = replicates`` networks per goal on one split, with initial weights number
    ``r``) or a list of ``R`` seeds (replicate ``r`` has its own split, initial weights and mini-batch
    order, all drawn from ``seed[r]``). Network ``(g, r)`` has goal ``goals[g]`` (default: ``[cfg.goal]``):
    the goals share the split, initial weights and mini-batch order of a replicate, so their differences
    are paired. Each layer's loss is $-\sum_j G_j$ over its neurons; the hidden outputs reach the output
    layer detached, so nothing is backpropagated between layers. Returns test ``accuracy`` ``[G, R]``,
    the hidden neurons' mean ``atoms`` per epoch ``[epochs, G, R, atoms + 1]`` and ``atom_labels``.

    ``device`` (default :func:`companion_lib.common.device`: the GPU when present, else the CPU) is where the
    networks train and are tested; initial weights, mini-batch orders and the units' random draws come from
    the CPU's generators as before, so on the CPU the results are the same numbers whatever the argument.
    """
    dev = resolve_device(device)
    goals = [_goal_dict(g) for g in (goals if goals is not None else [cfg.goal])]
    if not goals:
        raise ValueError("goals must name at least one goal")
    seeds, splits, own = _splits(seed, replicates, data)
    R, G = len(seeds), len(goals)
    Xtr, ytr, Xte, yte = _stack(splits)
    K = int(max(ytr.max(), yte.max())) + 1
    torch.manual_seed(seeds[0])
    net = InfoNet(Xtr.shape[-1], K, cfg, n_models=G * R)
    _init_replicates(net, seeds, own, Xtr.shape[-1], K, cfg, G)
    with torch.no_grad():
        net.out_w.mul_(0.1)
    net.to(dev)   # initialised on the CPU above (on the CPU, .to() is a no-op)
    torch.manual_seed(seeds[0])
    rngs = [np.random.default_rng(s) for s in (seeds if own else seeds[:1])]
    perms = _batches(seeds, own, Xtr.shape[1], cfg.batch)
    N = int(cfg.n_hidden)
    if net.hidden_sources:
        g_hidden = torch.stack([goal_vector(g, net.hidden_sources) for g in goals])        # [G, atoms]
        g_hidden = g_hidden.repeat_interleave(R * N, dim=0).to(dev)                         # [G*R*N, atoms]
    g_out = goal_vector(GOALS["output"], 2).to(dev)
    hidden_params = [net.ff_w, net.ff_b, net.ctx_w, net.ctx_b, net.lat_w, net.lat_b]
    opt_h = (torch.optim.Adam(hidden_params, lr=cfg.lr_hidden, weight_decay=cfg.wd_hidden)
             if net.hidden_sources else None)
    opt_o = torch.optim.Adam([net.out_w, net.out_b], lr=cfg.lr_output, weight_decay=cfg.wd_output)
    eye = torch.eye(K).to(dev)
    X_t, y_t = torch.as_tensor(Xtr).to(dev), torch.as_tensor(ytr).to(dev)      # [R, n, d], [R, n]
    rep_of_model = torch.arange(G * R) % R
    rep_dev, cols = rep_of_model.to(dev), torch.arange(R).to(dev)
    history = []
    for _ in range(cfg.epochs):
        perm = perms(rngs)                                         # [n, R]
        epoch_atoms = []
        for start in range(0, len(perm) - cfg.batch // 2, cfg.batch):
            ib = torch.as_tensor(perm[start:start + cfg.batch]).to(dev)    # [B, R]
            x = X_t[cols, ib][:, rep_dev]                          # [B, G*R, d]
            y1 = eye[y_t[cols, ib]][:, rep_dev]                    # [B, G*R, K]
            srcs, theta, s = net.hidden_forward(x, y1)
            if opt_h is not None:
                atoms = _atoms(srcs, theta, cfg.bins_hidden)
                loss = -(atoms * g_hidden).sum()
                opt_h.zero_grad()
                loss.backward()
                opt_h.step()
                epoch_atoms.append(atoms.detach().reshape(G, R, N, -1).mean(2))
            h = s.detach()
            theta_o = net.output_theta(h)
            # the label enters 1-to-1 as a +-1 signal (weights fixed to 1), binned into two bins
            label = 2 * y1 - 1
            atoms_o = _atoms([net.output_drive(h), label], theta_o, [cfg.bins_output, 2])
            loss_o = -(atoms_o @ g_out).sum()
            opt_o.zero_grad()
            loss_o.backward()
            opt_o.step()
        if epoch_atoms:
            history.append(torch.stack(epoch_atoms).mean(0).cpu().numpy())
    proba = predict_proba(net, Xte[:, rep_of_model.numpy()], cfg.test_passes)        # [B, G*R, K]
    accuracy = (proba.argmax(-1) == yte[:, rep_of_model.numpy()]).mean(0).reshape(G, R)
    labels = atom_labels(net.hidden_sources) + ("H_res",) if net.hidden_sources else ()
    return {"accuracy": accuracy, "atoms": np.array(history), "atom_labels": labels}


def run_experiment(cfg: TrainConfig, seed: int, data=None, device=None) -> dict:
    """One network (:func:`run_models` with one goal, one replicate): test accuracy and atom history.
    ``device`` as in :func:`run_models`."""
    r = run_models(cfg, seed, data=data, device=device)
    atoms = r["atoms"][:, 0, 0] if len(r["atoms"]) else r["atoms"]
    return {"accuracy": float(r["accuracy"][0, 0]), "atoms": atoms, "atom_labels": r["atom_labels"]}


def backprop_accuracy(cfg: TrainConfig, seed, data=None, lr: float = 0.02, device=None):
    r"""The paper's backprop baseline: the same network trained end to end by a surrogate gradient.

    The official ``GlobalBackpropModel``: the trivariate hidden layer of :class:`InfoNet` (label as
    context, two lateral passes, stochastic binary units whose samples carry the sigmoid surrogate
    gradient of :class:`SurrogateBernoulli`) and the unmodulated output layer, all weights trained by
    Adam (the paper's lr 0.001, scaled by the same factor 5 as the book's infomorphic learning rates)
    on the cross-entropy of the output drives. Tested like the infomorphic networks: context 0,
    ``cfg.test_passes`` stochastic passes averaged. ``seed`` as in :func:`run_models` (an int gives one
    network, a float accuracy; a list, one network per seed with its own split, an array of accuracies).
    ``device`` as in :func:`run_models` (where the networks train; the CPU's random draws as before).
    """
    if cfg.hidden != "trivariate":
        raise ValueError(f"the backprop baseline uses the trivariate hidden layer, got hidden={cfg.hidden!r}")
    if not lr > 0:
        raise ValueError(f"lr must be positive, got {lr!r}")
    dev = resolve_device(device)
    seeds, splits, own = _splits(seed, 1, data)
    R = len(seeds)
    Xtr, ytr, Xte, yte = _stack(splits)
    K = int(max(ytr.max(), yte.max())) + 1
    torch.manual_seed(seeds[0])
    net = InfoNet(Xtr.shape[-1], K, cfg, n_models=R)
    _init_replicates(net, seeds, own, Xtr.shape[-1], K, cfg, 1)
    net.to(dev)   # initialised on the CPU above (on the CPU, .to() is a no-op)
    torch.manual_seed(seeds[0])
    rngs = [np.random.default_rng(s) for s in (seeds if own else seeds[:1])]
    perms = _batches(seeds, own, Xtr.shape[1], cfg.batch)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    eye = torch.eye(K).to(dev)
    X_t, y_t = torch.as_tensor(Xtr).to(dev), torch.as_tensor(ytr).to(dev)
    cols = torch.arange(R).to(dev)
    for _ in range(cfg.epochs):
        perm = perms(rngs)
        for start in range(0, len(perm) - cfg.batch // 2, cfg.batch):
            ib = torch.as_tensor(perm[start:start + cfg.batch]).to(dev)
            x, y = X_t[cols, ib], y_t[cols, ib]                              # [B, R, d], [B, R]
            _, _, s = net.hidden_forward(x, eye[y], surrogate=True)
            logits = net.output_drive(s)                                      # [B, R, K]
            loss = nn.functional.cross_entropy(logits.reshape(-1, K), y.reshape(-1), reduction="sum") / len(ib)
            opt.zero_grad()
            loss.backward()
            opt.step()
    proba = predict_proba(net, Xte, cfg.test_passes, flip=False)
    acc = (proba.argmax(-1) == yte).mean(0)
    return float(acc[0]) if not isinstance(seed, (list, tuple, np.ndarray)) else acc


def with_(cfg: TrainConfig, **kw) -> TrainConfig:
    """A copy of ``cfg`` with some fields changed."""
    return replace(cfg, **kw)


def paired_interval(diff, level: float = 0.95) -> tuple:
    r"""Mean and two-sided ``level`` t-interval $(\bar d, lo, hi)$ of paired differences ``diff``
    (:func:`~companion_lib.common.replicates.mean_interval`)."""
    d = np.asarray(diff, dtype=float).ravel()
    lo, hi = mean_interval(d, level)
    return float(d.mean()), lo, hi
