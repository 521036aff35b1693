r"""Training: TopK/BatchTopK SAEs with the AuxK loss, unit-norm decoder rows and BatchTopK's inference
threshold, many in one batched loop (:func:`train_saes`), and meta-SAEs on the decoder rows of another SAE."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..common.device import resolve_device
from .model import SparseAutoencoder, _as_tensor, _check_k, batch_topk, topk_per_sample

__all__ = ["TrainHistory", "train_sae_reference", "train_sae", "train_saes", "train_meta_sae", "train_meta_saes"]


@dataclass
class TrainHistory:
    loss: list = field(default_factory=list)
    dead: list = field(default_factory=list)


def train_sae_reference(X, width: int, k: int, kind: str = "batchtopk", steps: int = 3000, batch_size: int = 256,
                        lr: float = 3e-3, k_aux: int = 16, aux_alpha: float = 1 / 32, dead_after: int = 200,
                        seed: int = 0, threshold_momentum: float = 0.99):
    r"""One TopK/BatchTopK SAE, one plain step at a time: the reference that the fast batched trainer
    :func:`train_saes` is tested against (same initialisation, batches, loss and updates). Returns
    ``(sae, history)``; see :func:`train_saes` for the loss."""
    X = _as_tensor(X, "X")
    n, d = X.shape
    gen = torch.Generator().manual_seed(int(seed))
    W_dec = torch.nn.functional.normalize(torch.randn(width, d, generator=gen), dim=1)
    sae = SparseAutoencoder(d, width, k, kind, W_dec=W_dec, b_dec=X.mean(0))   # W_enc starts at W_dec^T
    opt = torch.optim.Adam(sae.parameters(), lr=lr)
    full = batch_size >= n                                   # full batch: every row in every step
    batches = None if full else torch.randint(0, n, (steps, batch_size), generator=gen)
    last_fired = torch.zeros(width, dtype=torch.long)
    theta, history = None, TrainHistory()
    for step in range(steps):
        x = X if full else X[batches[step]]
        z = sae.pre_activations(x)
        f = batch_topk(z, k) if kind == "batchtopk" else topk_per_sample(z, k)
        err = x - sae.decode(f)
        loss = err.pow(2).sum(-1).mean()                     # MSE summed over features, mean over the batch
        last_fired[(f > 0).any(0)] = step
        dead = (step - last_fired) >= dead_after             # latents silent for dead_after steps
        if aux_alpha > 0 and dead.any():                     # AuxK: dead latents fit the detached residual
            z_dead = torch.relu(z[:, dead])
            if z_dead.shape[1] > k_aux:
                z_dead = topk_per_sample(z_dead, k_aux)
            e_aux = err.detach() - z_dead @ sae.W_dec[dead]
            loss = loss + aux_alpha * e_aux.pow(2).sum(-1).mean()
        opt.zero_grad()
        loss.backward()
        with torch.no_grad():                                # keep the decoder rows on the unit sphere
            g = sae.W_dec.grad
            g -= (g * sae.W_dec).sum(-1, keepdim=True) * sae.W_dec
        opt.step()
        with torch.no_grad():
            sae.W_dec /= sae.W_dec.norm(dim=-1, keepdim=True)
            if kind == "batchtopk" and (f > 0).any():        # EMA of the smallest kept activation
                m = f[f > 0].min()
                theta = m if theta is None else threshold_momentum * theta + (1 - threshold_momentum) * m
        history.loss.append(float(loss.detach()))
        history.dead.append(int(dead.sum()))
    if kind == "batchtopk" and theta is not None:
        sae.threshold.fill_(float(theta))
    return sae, history


def train_saes(Xs, width: int, k: int, kind: str = "batchtopk", steps: int = 3000, batch_size: int = 256,
               lr: float = 3e-3, k_aux: int = 16, aux_alpha: float = 1 / 32, dead_after: int = 200,
               fix_b_dec_zero=False, seeds=(0,), threshold_momentum: float = 0.99, b_dec_init="mean", device=None):
    r"""Train one TopK/BatchTopK SAE per data set in ``Xs`` (a list of arrays with the same number of
    columns), all in one batched loop; returns ``(saes, histories)``. SAE $r$ sees only ``Xs[r]`` and
    draws its initialisation and batches from ``seeds[r]``; the models share nothing but the loop (their
    losses are summed, and Adam is elementwise), so each is trained as it would be alone.

    Loss per batch: $\frac1B\sum_b\|x_b-\hat x_b\|^2+\alpha\frac1B\sum_b\|e_b-\hat e_b\|^2$, where
    $e=(x-\hat x)$ is detached and $\hat e = \mathrm{TopK}_{k_{aux}}(z_{\text{dead}})W_{dec}$ uses only
    latents that have not fired for ``dead_after`` steps (AuxK). The decoder gradient is projected
    orthogonal to the rows before each Adam step and the rows are renormalised to unit norm after it.
    $b_{dec}$ is learned from the data mean (``b_dec_init="mean"``) or from zero (``"zero"``, the
    official meta-SAE code's initialisation), or is fixed at zero with ``fix_b_dec_zero`` (the research
    note's meta-SAE choice); ``fix_b_dec_zero`` may be one bool per data set.
    A batch is ``batch_size`` rows drawn with replacement, or every row once when ``batch_size`` is at
    least the number of rows (full batch). BatchTopK's inference threshold $\theta$ is an exponential
    moving average (``threshold_momentum``) of the smallest activation kept by batch top-k in each batch.
    ``device`` (default :func:`companion_lib.common.device`: the GPU when present, else the CPU) is where the
    stacked weights train and the batches are gathered; the initialisation and batch rows are drawn on the
    CPU generators as always, and the SAEs and histories come back on the CPU, so a CPU run is the same
    whatever the device argument.
    """
    Xs = [_as_tensor(X, "X") for X in Xs]
    if not Xs:
        raise ValueError("Xs must hold at least one data set")
    seeds = list(seeds)
    if len(seeds) != len(Xs):
        raise ValueError(f"seeds must give one seed per data set ({len(Xs)}), got {len(seeds)}")
    d = Xs[0].shape[1]
    if any(X.shape[1] != d for X in Xs):
        raise ValueError("every data set in Xs must have the same number of columns")
    if kind not in ("topk", "batchtopk"):
        raise ValueError(f"kind must be 'topk' or 'batchtopk', got {kind!r}")
    k = _check_k(k, width)
    if steps < 1 or batch_size < 1:
        raise ValueError(f"steps and batch_size must be positive, got {steps}, {batch_size}")
    R = len(Xs)
    fixed = [bool(v) for v in fix_b_dec_zero] if isinstance(fix_b_dec_zero, (list, tuple)) else [bool(fix_b_dec_zero)] * R
    if len(fixed) != R:
        raise ValueError(f"fix_b_dec_zero must be one bool or one per data set ({R}), got {len(fixed)}")
    inits = list(b_dec_init) if isinstance(b_dec_init, (list, tuple)) else [b_dec_init] * R
    if len(inits) != R or any(i not in ("mean", "zero") for i in inits):
        raise ValueError(f"b_dec_init must be 'mean' or 'zero' (or one of them per data set), got {b_dec_init!r}")
    dev = resolve_device(device)
    gens = [torch.Generator().manual_seed(int(s)) for s in seeds]
    W_enc, b_enc, W_dec, b_dec, theta, losses, deads = (t.detach().cpu() for t in _train_stacked(
        Xs, gens, width, k, kind, steps, batch_size, lr, k_aux, aux_alpha, dead_after, fixed, inits,
        threshold_momentum, dev))
    losses, deads = losses.numpy(), deads.numpy()
    saes, histories = [], []
    with torch.no_grad():
        for r in range(R):
            sae = SparseAutoencoder(d, width, k, kind, W_enc=W_enc[r], b_enc=b_enc[r], W_dec=W_dec[r],
                                    b_dec=b_dec[r])
            if kind == "batchtopk" and torch.isfinite(theta[r]):
                sae.threshold.fill_(float(theta[r]))
            saes.append(sae)
            histories.append(TrainHistory([float(v) for v in losses[:, r]], [int(v) for v in deads[:, r]]))
    return saes, histories


def _train_stacked(Xs, gens, width, k, kind, steps, batch_size, lr, k_aux, aux_alpha, dead_after, fixed, inits,
                   threshold_momentum, dev):
    r"""The loop of :func:`train_saes` (arguments checked there) on the device ``dev``: the initial decoders
    and the batch rows are drawn from the CPU generators ``gens`` as always and moved to ``dev``. Returns the
    stacked ``W_enc, b_enc, W_dec, b_dec``, the thresholds, the per-model losses and dead counts
    (``steps x R``), all on ``dev``."""
    R, d = len(Xs), Xs[0].shape[1]
    W_dec = torch.stack([torch.nn.functional.normalize(torch.randn(width, d, generator=g), dim=1) for g in gens])
    W_dec = W_dec.to(dev)
    W_enc = W_dec.transpose(1, 2).clone()
    b_enc = torch.zeros(R, width, device=dev)
    b_dec = torch.stack([torch.zeros(d) if f or i == "zero" else X.mean(0) for f, i, X in zip(fixed, inits, Xs)])
    b_dec = b_dec.to(dev)
    for t in (W_enc, b_enc, W_dec, b_dec):
        t.requires_grad_(True)
    params = [W_enc, b_enc, W_dec] + ([] if all(fixed) else [b_dec])
    # models with a fixed b_dec among learned ones: a zero gradient leaves Adam's step exactly zero
    learn_mask = (None if all(fixed) or not any(fixed)
                  else torch.tensor([not f for f in fixed], dtype=torch.float32)[:, None].to(dev))
    opt = torch.optim.Adam(params, lr=lr)
    # batches: B_r rows for model r (every row when the batch covers the data), padded to B rows
    sizes = [min(batch_size, X.shape[0]) for X in Xs]
    full = [batch_size >= X.shape[0] for X in Xs]
    B = max(sizes)
    valid = (torch.arange(B)[None, :] < torch.tensor(sizes)[:, None]).to(dev)    # R x B
    n_keep = torch.tensor(sizes) * k                                             # batch top-k per model
    keep_rank = (torch.arange(B * k)[None, :] < n_keep[:, None]).to(dev)
    inv_size = (1.0 / torch.tensor(sizes, dtype=torch.float32)).to(dev)
    # every model's batch fills all B rows: the masks are all ones, and multiplying by them (forward or
    # backward) changes no bit, so they are skipped; batch top-k then keeps all B*k values, in any order
    all_valid = all(size == B for size in sizes)
    mask = None if all_valid else valid[:, :, None]
    rows_full = torch.zeros(R, B, d)
    for r, X in enumerate(Xs):
        if full[r]:
            rows_full[r, :sizes[r]] = X
    rows_full = rows_full.to(dev)
    same = not any(full) and len({X.shape[0] for X in Xs}) == 1
    if same:   # every model draws its batches from its own generator, all steps at once
        X_all = torch.stack(Xs)
        n_rows = X_all.shape[1]
        batch_idx = torch.stack([torch.randint(0, n_rows, (steps, B), generator=g) for g in gens], 1)
        batch_idx += (n_rows * torch.arange(R))[:, None]         # row indices into the R * n_rows stacked rows
        batch_idx = batch_idx.to(dev)
        X_flat = X_all.reshape(R * n_rows, d).to(dev)             # (index_select copies the same rows, faster)
    elif not all(full):   # the rows are drawn on the CPU generators step by step and gathered on dev
        Xs = [X.to(dev) for X in Xs]
    last_fired = torch.zeros(R, width, dtype=torch.long, device=dev)
    k_aux = min(int(k_aux), width)
    theta = torch.full((R,), float("nan"), device=dev)
    losses, deads = [], []
    inf = torch.tensor(float("inf"), device=dev)
    for step in range(steps):
        if all(full):
            x = rows_full
        elif same:
            x = X_flat.index_select(0, batch_idx[step].reshape(-1)).reshape(R, B, d)
        else:
            x = rows_full.clone()
            for r, X in enumerate(Xs):
                if not full[r]:
                    x[r, :sizes[r]] = X[torch.randint(0, X.shape[0], (sizes[r],), generator=gens[r]).to(dev)]
        z = torch.baddbmm(b_enc[:, None, :], x - b_dec[:, None, :], W_enc)      # R x B x width
        zr = torch.relu(z) if all_valid else torch.relu(z) * mask
        if kind == "batchtopk":
            top = torch.topk(zr.reshape(R, -1), B * k, dim=1, sorted=not all_valid)   # same kept set either way
            kept = top.values if all_valid else top.values * keep_rank
            # (scatter_ into fresh zeros: the same values and gradients as zeros_like(...).scatter, one copy fewer)
            f = torch.zeros(R, B * width, device=dev).scatter_(1, top.indices, kept).reshape(R, B, width)
        else:
            top = torch.topk(zr, k, dim=-1)
            f = torch.zeros(R, B, width, device=dev).scatter_(-1, top.indices, top.values)
        x_hat = torch.baddbmm(b_dec[:, None, :], f, W_dec)
        err = (x - x_hat) if all_valid else (x - x_hat) * mask
        per_model = err.pow(2).sum(-1).sum(-1) * inv_size
        loss = per_model.sum()
        with torch.no_grad():
            if kind == "batchtopk":   # = (f > 0).any(1), counted on the B*k kept entries only (exact integers)
                fired = torch.zeros(R, width, device=dev).scatter_add_(1, top.indices % width, (kept > 0).float()) > 0
            else:
                fired = (f > 0).any(1)
            last_fired.masked_fill_(fired, step)
            dead = (step - last_fired) >= dead_after                            # R x width
        if aux_alpha > 0 and bool(dead.any()):
            e = err.detach()
            cols = torch.nonzero(dead.any(0)).squeeze(1)          # latents dead in some model
            z_dead = zr[:, :, cols] * dead[:, None, cols]
            if len(cols) > k_aux:                                  # else every dead latent is used
                top_aux = torch.topk(z_dead, k_aux, dim=-1, sorted=False)   # the same kept set, unordered
                z_dead = torch.zeros(z_dead.shape, device=dev).scatter_(-1, top_aux.indices, top_aux.values)
            e_aux = e - torch.bmm(z_dead, W_dec[:, cols])
            aux = (e_aux if all_valid else e_aux * mask).pow(2).sum(-1).sum(-1) * inv_size
            per_model = per_model + aux_alpha * aux * dead.any(1)
            loss = loss + aux_alpha * (aux * dead.any(1)).sum()
        for t in params:      # opt.zero_grad(set_to_none=True), without the optimizer's bookkeeping
            t.grad = None
        loss.backward()
        with torch.no_grad():
            g = W_dec.grad
            g -= (g * W_dec).sum(-1, keepdim=True) * W_dec
            if learn_mask is not None:
                b_dec.grad *= learn_mask
        opt.step()
        with torch.no_grad():
            W_dec /= W_dec.norm(dim=-1, keepdim=True)
            if kind == "batchtopk":
                # the smallest kept activation: f's positive entries are exactly the positive kept values
                m = torch.where(kept > 0, kept, inf).amin(dim=1)
                ok = torch.isfinite(m)
                first = ok & torch.isnan(theta)
                theta = torch.where(first, m, torch.where(ok, threshold_momentum * theta + (1 - threshold_momentum) * m, theta))
            losses.append(per_model.detach())
            deads.append(dead.sum(1))
    return W_enc, b_enc, W_dec, b_dec, theta, torch.stack(losses), torch.stack(deads)


def train_sae(X, width: int, k: int, kind: str = "batchtopk", steps: int = 3000, batch_size: int = 256,
              lr: float = 3e-3, k_aux: int = 16, aux_alpha: float = 1 / 32, dead_after: int = 200,
              fix_b_dec_zero: bool = False, seed: int = 0, threshold_momentum: float = 0.99, device=None):
    r"""Train one TopK/BatchTopK SAE on the rows of ``X``; returns ``(sae, history)``. The loop is
    :func:`train_saes` with a single data set (see there for the loss, AuxK, the decoder constraint, the
    inference threshold and ``device``, where it trains; the SAE comes back on the CPU)."""
    saes, histories = train_saes([X], width, k, kind, steps=steps, batch_size=batch_size, lr=lr, k_aux=k_aux,
                                 aux_alpha=aux_alpha, dead_after=dead_after, fix_b_dec_zero=fix_b_dec_zero,
                                 seeds=[seed], threshold_momentum=threshold_momentum, device=device)
    return saes[0], histories[0]


def train_meta_saes(row_sets, width: int, k: int = 3, steps: int = 3000, lr: float = 3e-3,
                    fix_b_dec_zero=True, seeds=(0,), device=None, **kw):
    r"""Meta-SAEs, one per set of decoder rows in ``row_sets``: BatchTopK SAEs whose data points are the
    unit decoder rows $d^B_j$ of another SAE, trained full-batch (every row in every step). $b_{dec}$ is
    fixed at zero by default (the research note's choice: decoder directions are not centred data, and
    subtracting their mean removes the shared atoms); the official meta-SAE code instead *learns*
    $b_{dec}$ from a zero initialisation (``fix_b_dec_zero=False, b_dec_init="zero"``). ``device`` is where
    they train (default: the GPU when present, else the CPU; see :func:`train_saes`); they come back on the CPU."""
    row_sets = [_as_tensor(rows, "decoder_rows") for rows in row_sets]
    return train_saes(row_sets, width, k, "batchtopk", steps=steps, batch_size=max(len(r) for r in row_sets), lr=lr,
                      fix_b_dec_zero=fix_b_dec_zero, seeds=seeds, device=device, **kw)


def train_meta_sae(decoder_rows, width: int, k: int = 3, steps: int = 3000, lr: float = 3e-3,
                   fix_b_dec_zero=True, seed: int = 0, device=None, **kw):
    r"""One meta-SAE on ``decoder_rows`` (see :func:`train_meta_saes`, also for ``device``); returns
    ``(meta_sae, history)``."""
    saes, histories = train_meta_saes([decoder_rows], width, k, steps=steps, lr=lr, fix_b_dec_zero=fix_b_dec_zero,
                                      seeds=[seed], device=device, **kw)
    return saes[0], histories[0]
