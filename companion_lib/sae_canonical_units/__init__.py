r"""Sparse autoencoders do not find canonical units of analysis (Leask et al., ICLR 2025), in miniature.

The paper asks whether a sparse autoencoder (SAE) finds *canonical* units: a dictionary that is
**complete** (nothing a larger SAE knows is missing) and **atomic** (no latent is a combination of
others). It answers no, with two tools, both implemented here on synthetic data whose ground truth is
known:

* **SAE stitching**: insert a latent $j$ of a larger SAE $B$ into a smaller SAE $A$. *Novel* latents
  lower the reconstruction error ($\Delta\mathrm{MSE}_j<0$: $A$ was incomplete); *reconstruction*
  latents raise it (they re-encode what $A$ already has) and must instead *replace* a group of $A$'s
  latents.
* **Meta-SAEs**: an SAE trained on the unit-norm decoder rows $d^B_j$ of another SAE,
  $d^B_j\approx\sum_a g_a(d^B_j)\,u_a$ with few active meta-latents $u_a$: latents are not atomic.

The SAEs are TopK and BatchTopK SAEs,

$$
z = W_{enc}^\top(x-b_{dec})+b_{enc},\qquad f=\sigma(z),\qquad \hat x = b_{dec}+\sum_i f_i\,d_i,\quad \|d_i\|=1,
$$

where TopK's $\sigma$ keeps the $k$ largest entries of each row of $\mathrm{ReLU}(z)$, BatchTopK's keeps
the $kB$ largest entries of the whole batch, and at inference BatchTopK uses a global threshold
$f_i=z_i\,\mathbb 1[z_i>\theta]$ (a JumpReLU) estimated during training. Training minimises
$\|x-\hat x\|^2+\alpha\,\|e-\hat e_{\text{dead}}\|^2$ (the AuxK term: the top-$k_{aux}$ dead latents
reconstruct the detached residual $e$), with decoder rows kept at unit norm.

Only numpy and torch are used at run time (and scipy, for the $t$ quantile of :func:`mean_ci`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

__all__ = [
    "SyntheticWorld", "make_world", "sample_activations", "SparseAutoencoder", "JumpReLUDictionary",
    "batch_topk", "topk_per_sample", "train_sae", "train_saes", "train_meta_sae", "train_meta_saes", "nmse", "mean_l0", "alive_latents",
    "max_cosine", "recovered_fraction", "classify_latents", "insertion_deltas", "stitching_path",
    "swap_groups", "meta_decomposition", "atom_hit_fraction", "run_experiments", "run_experiment", "mean_ci", "summarize",
]


# ----------------------------------------------------------------------------- synthetic data
@dataclass
class SyntheticWorld:
    r"""A known compositional ground truth in $\mathbb R^d$.

    ``atoms`` (n_atoms x d): shared properties ("scientist", "German"). ``entities`` (n_entities x d):
    $e=\mathrm{normalize}(\sum_{a\in S_e}u_a+w\,v_e)$ with $|S_e|$ atoms and a specific direction
    $v_e$ of weight $w$ (``specific_weight``). ``entity_atoms`` (n_entities x atoms_per_entity): the
    index sets $S_e$. ``rare`` (n_rare x d): independent features, each active with ``p_rare``.
    """

    atoms: np.ndarray
    entities: np.ndarray
    entity_atoms: np.ndarray
    rare: np.ndarray
    rate: float = 1.2
    p_rare: float = 0.01
    noise: float = 0.01
    specific_weight: float = 0.5

    @property
    def d(self) -> int:
        return self.atoms.shape[1]


def _unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


def make_world(rng: np.random.Generator, d: int = 32, n_atoms: int = 20, n_entities: int = 64,
               atoms_per_entity: int = 3, specific_weight: float = 0.5, n_rare: int = 12,
               p_rare: float = 0.01, rate: float = 1.2, noise: float = 0.01) -> SyntheticWorld:
    r"""Draw random unit atoms, entities $\mathrm{normalize}(\sum_{a\in S_e}u_a+w\,v_e)$ and rare features."""
    for name, value in dict(d=d, n_atoms=n_atoms, n_entities=n_entities, atoms_per_entity=atoms_per_entity).items():
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if atoms_per_entity > n_atoms:
        raise ValueError(f"atoms_per_entity must be <= n_atoms ({n_atoms}), got {atoms_per_entity}")
    if n_rare < 0 or not 0 <= p_rare <= 1 or rate < 0 or noise < 0 or specific_weight < 0:
        raise ValueError("n_rare, rate, noise, specific_weight must be >= 0 and p_rare in [0, 1]")
    atoms = _unit(rng.standard_normal((n_atoms, d)))
    entity_atoms = np.stack([np.sort(rng.choice(n_atoms, atoms_per_entity, replace=False))
                             for _ in range(n_entities)])
    specific = _unit(rng.standard_normal((n_entities, d)))
    entities = _unit(atoms[entity_atoms].sum(axis=1) + specific_weight * specific)
    rare = _unit(rng.standard_normal((n_rare, d))) if n_rare else np.zeros((0, d))
    return SyntheticWorld(atoms, entities, entity_atoms, rare, rate, p_rare, noise, specific_weight)


def sample_activations(world: SyntheticWorld, n: int, rng: np.random.Generator) -> np.ndarray:
    r"""``n`` samples: Poisson(rate) entities and the rare features (prob. ``p_rare`` each), with
    magnitudes $U(0.5, 1.5)$, plus $N(0,\text{noise}^2)$ noise. Returns float32 (n x d)."""
    if int(n) != n or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    n_ent, n_rare = len(world.entities), len(world.rare)
    counts = rng.poisson(world.rate, n)
    coef = np.zeros((n, n_ent))
    rows = np.repeat(np.arange(n), counts)
    coef[rows, rng.integers(0, n_ent, rows.size)] = rng.uniform(0.5, 1.5, rows.size)
    x = coef @ world.entities
    if n_rare:
        on = rng.random((n, n_rare)) < world.p_rare
        x += (on * rng.uniform(0.5, 1.5, (n, n_rare))) @ world.rare
    x += world.noise * rng.standard_normal(x.shape)
    return x.astype(np.float32)


# ----------------------------------------------------------------------------- activations
def _check_k(k, width: int) -> int:
    if isinstance(k, bool) or int(k) != k or k <= 0:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    if k > width:
        raise ValueError(f"k must be <= the width ({width}), got {k}")
    return int(k)


def topk_per_sample(z: torch.Tensor, k: int) -> torch.Tensor:
    r"""TopK: keep the $k$ largest entries of each row of $\mathrm{ReLU}(z)$, zero the rest."""
    k = _check_k(k, z.shape[-1])
    z = torch.relu(z)
    top = torch.topk(z, k, dim=-1)
    return torch.zeros_like(z).scatter(-1, top.indices, top.values)


def batch_topk(z: torch.Tensor, k: int) -> torch.Tensor:
    r"""BatchTopK: keep the $kB$ largest entries of the whole batch $\mathrm{ReLU}(z)$ ($B$ rows), so
    that rows have $k$ active latents *on average*."""
    k = _check_k(k, z.shape[-1])
    z = torch.relu(z)
    flat = z.reshape(-1)
    top = torch.topk(flat, k * z.shape[0])
    return torch.zeros_like(flat).scatter(0, top.indices, top.values).reshape(z.shape)


def _as_tensor(x, name: str = "x") -> torch.Tensor:
    x = torch.as_tensor(np.asarray(x, dtype=np.float32)) if not isinstance(x, torch.Tensor) else x.float()
    if x.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (samples x features), got shape {tuple(x.shape)}")
    if not torch.isfinite(x).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return x


class SparseAutoencoder(torch.nn.Module):
    r"""A TopK or BatchTopK SAE: $z=(x-b_{dec})W_{enc}+b_{enc}$, $\hat x=b_{dec}+f(z)W_{dec}$.

    ``kind`` is ``"topk"`` or ``"batchtopk"``; ``threshold`` ($\theta$) is BatchTopK's global inference
    threshold (NaN until estimated). ``encode(x, batch=True)`` uses the training activation (batch
    top-k for BatchTopK); ``batch=False`` the inference one (per-sample top-k for TopK, the JumpReLU
    threshold for BatchTopK), so that a sample's code does not depend on the rest of its batch.
    """

    def __init__(self, d_in: int, width: int, k: int, kind: str = "batchtopk",
                 W_enc=None, b_enc=None, W_dec=None, b_dec=None) -> None:
        super().__init__()
        if kind not in ("topk", "batchtopk"):
            raise ValueError(f"kind must be 'topk' or 'batchtopk', got {kind!r}")
        if int(d_in) != d_in or d_in < 1 or int(width) != width or width < 1:
            raise ValueError(f"d_in and width must be positive integers, got {d_in!r}, {width!r}")
        self.k, self.kind, self.d_in, self.width = _check_k(k, width), kind, int(d_in), int(width)
        W_dec = torch.nn.functional.normalize(torch.randn(width, d_in), dim=1) if W_dec is None else torch.as_tensor(W_dec).float()
        W_enc = W_dec.T.clone() if W_enc is None else torch.as_tensor(W_enc).float()
        if tuple(W_enc.shape) != (d_in, width):
            raise ValueError(f"W_enc must have shape (d_in, width) = {(d_in, width)}, got {tuple(W_enc.shape)}")
        if tuple(W_dec.shape) != (width, d_in):
            raise ValueError(f"W_dec must have shape (width, d_in) = {(width, d_in)} to match the encoder, got {tuple(W_dec.shape)}")
        self.W_enc = torch.nn.Parameter(W_enc.clone())
        self.W_dec = torch.nn.Parameter(W_dec.clone())
        self.b_enc = torch.nn.Parameter(torch.zeros(width) if b_enc is None else torch.as_tensor(b_enc).float().clone())
        self.b_dec = torch.nn.Parameter(torch.zeros(d_in) if b_dec is None else torch.as_tensor(b_dec).float().clone())
        self.register_buffer("threshold", torch.tensor(float("nan")))

    def pre_activations(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.b_dec) @ self.W_enc + self.b_enc

    def encode(self, x, batch: bool = True) -> torch.Tensor:
        z = self.pre_activations(_as_tensor(x) if not isinstance(x, torch.Tensor) else x)
        if self.kind == "topk":
            return topk_per_sample(z, self.k)
        if batch:
            return batch_topk(z, self.k)
        if not torch.isfinite(self.threshold):
            raise ValueError("the inference threshold is not estimated yet: train the SAE or set .threshold")
        return z * (z > self.threshold)

    def decode(self, f: torch.Tensor) -> torch.Tensor:
        return f @ self.W_dec + self.b_dec

    def forward(self, x, batch: bool = True) -> torch.Tensor:
        return self.decode(self.encode(x, batch))

    def as_dictionary(self) -> "JumpReLUDictionary":
        """The inference form of a BatchTopK SAE as a per-latent JumpReLU dictionary (for stitching)."""
        if self.kind != "batchtopk" or not torch.isfinite(self.threshold):
            raise ValueError("only a trained BatchTopK SAE (with an inference threshold) has a JumpReLU form")
        with torch.no_grad():
            return JumpReLUDictionary(self.W_enc.numpy().copy(), self.b_enc.numpy().copy(),
                                      self.W_dec.numpy().copy(), self.b_dec.numpy().copy(),
                                      np.full(self.width, float(self.threshold)))


# ----------------------------------------------------------------------------- training
@dataclass
class TrainHistory:
    loss: list = field(default_factory=list)
    dead: list = field(default_factory=list)


def train_saes(Xs, width: int, k: int, kind: str = "batchtopk", steps: int = 3000, batch_size: int = 256,
               lr: float = 3e-3, k_aux: int = 16, aux_alpha: float = 1 / 32, dead_after: int = 200,
               fix_b_dec_zero: bool = False, seeds=(0,), threshold_momentum: float = 0.99):
    r"""Train one TopK/BatchTopK SAE per data set in ``Xs`` (a list of arrays with the same number of
    columns), all in one batched loop; returns ``(saes, histories)``. SAE $r$ sees only ``Xs[r]`` and
    draws its initialisation and batches from ``seeds[r]``; the models share nothing but the loop (their
    losses are summed, and Adam is elementwise), so each is trained as it would be alone.

    Loss per batch: $\frac1B\sum_b\|x_b-\hat x_b\|^2+\alpha\frac1B\sum_b\|e_b-\hat e_b\|^2$, where
    $e=(x-\hat x)$ is detached and $\hat e = \mathrm{TopK}_{k_{aux}}(z_{\text{dead}})W_{dec}$ uses only
    latents that have not fired for ``dead_after`` steps (AuxK). The decoder gradient is projected
    orthogonal to the rows before each Adam step and the rows are renormalised to unit norm after it.
    $b_{dec}$ starts at the data mean (or is fixed at zero with ``fix_b_dec_zero``, as for meta-SAEs).
    A batch is ``batch_size`` rows drawn with replacement, or every row once when ``batch_size`` is at
    least the number of rows (full batch). BatchTopK's inference threshold $\theta$ is an exponential
    moving average (``threshold_momentum``) of the smallest activation kept by batch top-k in each batch.
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
    gens = [torch.Generator().manual_seed(int(s)) for s in seeds]
    W_dec = torch.stack([torch.nn.functional.normalize(torch.randn(width, d, generator=g), dim=1) for g in gens])
    W_enc = W_dec.transpose(1, 2).clone()
    b_enc = torch.zeros(R, width)
    b_dec = torch.zeros(R, d) if fix_b_dec_zero else torch.stack([X.mean(0) for X in Xs])
    for t in (W_enc, b_enc, W_dec, b_dec):
        t.requires_grad_(True)
    params = [W_enc, b_enc, W_dec] + ([] if fix_b_dec_zero else [b_dec])
    opt = torch.optim.Adam(params, lr=lr)
    # batches: B_r rows for model r (every row when the batch covers the data), padded to B rows
    sizes = [min(batch_size, X.shape[0]) for X in Xs]
    full = [batch_size >= X.shape[0] for X in Xs]
    B = max(sizes)
    valid = (torch.arange(B)[None, :] < torch.tensor(sizes)[:, None])            # R x B
    n_keep = torch.tensor(sizes) * k                                             # batch top-k per model
    keep_rank = torch.arange(B * k)[None, :] < n_keep[:, None]
    inv_size = 1.0 / torch.tensor(sizes, dtype=torch.float32)
    # every model's batch fills all B rows: the masks are all ones, and multiplying by them (forward or
    # backward) changes no bit, so they are skipped; batch top-k then keeps all B*k values, in any order
    all_valid = all(size == B for size in sizes)
    mask = None if all_valid else valid[:, :, None]
    rows_full = torch.zeros(R, B, d)
    for r, X in enumerate(Xs):
        if full[r]:
            rows_full[r, :sizes[r]] = X
    same = not any(full) and len({X.shape[0] for X in Xs}) == 1
    if same:   # every model draws its batches from its own generator, all steps at once
        X_all = torch.stack(Xs)
        n_rows = X_all.shape[1]
        batch_idx = torch.stack([torch.randint(0, n_rows, (steps, B), generator=g) for g in gens], 1)
        batch_idx += (n_rows * torch.arange(R))[:, None]         # row indices into the R * n_rows stacked rows
        X_flat = X_all.reshape(R * n_rows, d)                     # (index_select copies the same rows, faster)
    last_fired = torch.zeros(R, width, dtype=torch.long)
    k_aux = min(int(k_aux), width)
    theta = torch.full((R,), float("nan"))
    losses, deads = [], []
    inf = torch.tensor(float("inf"))
    for step in range(steps):
        if all(full):
            x = rows_full
        elif same:
            x = X_flat.index_select(0, batch_idx[step].reshape(-1)).reshape(R, B, d)
        else:
            x = rows_full.clone()
            for r, X in enumerate(Xs):
                if not full[r]:
                    x[r, :sizes[r]] = X[torch.randint(0, X.shape[0], (sizes[r],), generator=gens[r])]
        z = torch.baddbmm(b_enc[:, None, :], x - b_dec[:, None, :], W_enc)      # R x B x width
        zr = torch.relu(z) if all_valid else torch.relu(z) * mask
        if kind == "batchtopk":
            top = torch.topk(zr.reshape(R, -1), B * k, dim=1, sorted=not all_valid)   # same kept set either way
            kept = top.values if all_valid else top.values * keep_rank
            # (scatter_ into fresh zeros: the same values and gradients as zeros_like(...).scatter, one copy fewer)
            f = torch.zeros(R, B * width).scatter_(1, top.indices, kept).reshape(R, B, width)
        else:
            top = torch.topk(zr, k, dim=-1)
            f = torch.zeros(R, B, width).scatter_(-1, top.indices, top.values)
        x_hat = torch.baddbmm(b_dec[:, None, :], f, W_dec)
        err = (x - x_hat) if all_valid else (x - x_hat) * mask
        per_model = err.pow(2).sum(-1).sum(-1) * inv_size
        loss = per_model.sum()
        with torch.no_grad():
            if kind == "batchtopk":   # = (f > 0).any(1), counted on the B*k kept entries only (exact integers)
                fired = torch.zeros(R, width).scatter_add_(1, top.indices % width, (kept > 0).float()) > 0
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
                z_dead = torch.zeros(z_dead.shape).scatter_(-1, top_aux.indices, top_aux.values)
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
    losses, deads = torch.stack(losses).numpy(), torch.stack(deads).numpy()
    saes, histories = [], []
    with torch.no_grad():
        for r in range(R):
            sae = SparseAutoencoder(d, width, k, kind, W_enc=W_enc[r].detach(), b_enc=b_enc[r].detach(),
                                    W_dec=W_dec[r].detach(), b_dec=b_dec[r].detach())
            if kind == "batchtopk" and torch.isfinite(theta[r]):
                sae.threshold.fill_(float(theta[r]))
            saes.append(sae)
            histories.append(TrainHistory([float(v) for v in losses[:, r]], [int(v) for v in deads[:, r]]))
    return saes, histories


def train_sae(X, width: int, k: int, kind: str = "batchtopk", steps: int = 3000, batch_size: int = 256,
              lr: float = 3e-3, k_aux: int = 16, aux_alpha: float = 1 / 32, dead_after: int = 200,
              fix_b_dec_zero: bool = False, seed: int = 0, threshold_momentum: float = 0.99):
    r"""Train one TopK/BatchTopK SAE on the rows of ``X``; returns ``(sae, history)``. The loop is
    :func:`train_saes` with a single data set (see there for the loss, AuxK, the decoder constraint and
    the inference threshold)."""
    saes, histories = train_saes([X], width, k, kind, steps=steps, batch_size=batch_size, lr=lr, k_aux=k_aux,
                                 aux_alpha=aux_alpha, dead_after=dead_after, fix_b_dec_zero=fix_b_dec_zero,
                                 seeds=[seed], threshold_momentum=threshold_momentum)
    return saes[0], histories[0]


def train_meta_saes(row_sets, width: int, k: int = 3, steps: int = 3000, lr: float = 3e-3,
                    fix_b_dec_zero: bool = True, seeds=(0,), **kw):
    r"""Meta-SAEs, one per set of decoder rows in ``row_sets``: BatchTopK SAEs whose data points are the
    unit decoder rows $d^B_j$ of another SAE, trained full-batch (every row in every step). $b_{dec}$ is
    fixed at zero by default: decoder directions are not centred data, and subtracting their mean
    removes the shared atoms."""
    row_sets = [_as_tensor(rows, "decoder_rows") for rows in row_sets]
    return train_saes(row_sets, width, k, "batchtopk", steps=steps, batch_size=max(len(r) for r in row_sets), lr=lr,
                      fix_b_dec_zero=fix_b_dec_zero, seeds=seeds, **kw)


def train_meta_sae(decoder_rows, width: int, k: int = 3, steps: int = 3000, lr: float = 3e-3,
                   fix_b_dec_zero: bool = True, seed: int = 0, **kw):
    r"""One meta-SAE on ``decoder_rows`` (see :func:`train_meta_saes`); returns ``(meta_sae, history)``."""
    saes, histories = train_meta_saes([decoder_rows], width, k, steps=steps, lr=lr, fix_b_dec_zero=fix_b_dec_zero,
                                      seeds=[seed], **kw)
    return saes[0], histories[0]


# ----------------------------------------------------------------------------- evaluation
def _reconstruct(model, X: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        if isinstance(model, JumpReLUDictionary):
            return torch.as_tensor(model.reconstruct(X.numpy()))
        return model(X, batch=(model.kind == "batchtopk" and not torch.isfinite(model.threshold)))


def nmse(model, X) -> float:
    r"""Normalised MSE $\sum\|x-\hat x\|^2/\sum\|x-\bar x\|^2$ with the inference activation."""
    X = _as_tensor(X, "X")
    err = (X - _reconstruct(model, X)).pow(2).sum()
    return float(err / (X - X.mean(0)).pow(2).sum())


def _codes(model, X: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        if isinstance(model, JumpReLUDictionary):
            return model.encode(X.numpy())
        return model.encode(X, batch=(model.kind == "batchtopk" and not torch.isfinite(model.threshold))).numpy()


def mean_l0(model, X) -> float:
    """Average number of active latents per sample (inference activation)."""
    return float((_codes(model, _as_tensor(X)) > 0).sum(1).mean())


def alive_latents(model, X) -> np.ndarray:
    """Boolean mask of latents that fire on at least one row of ``X`` (inference activation)."""
    return (_codes(model, _as_tensor(X)) > 0).any(0)


def _rows(model_or_rows) -> np.ndarray:
    if isinstance(model_or_rows, SparseAutoencoder):
        return model_or_rows.W_dec.detach().numpy()
    if isinstance(model_or_rows, JumpReLUDictionary):
        return model_or_rows.W_dec
    return np.asarray(model_or_rows, dtype=float)


def max_cosine(rows, others) -> np.ndarray:
    r"""$c_j=\max_i\cos(r_j, o_i)$ for each row $r_j$ of ``rows`` against the rows of ``others``."""
    a, b = _unit(_rows(rows)), _unit(_rows(others))
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"rows have dimension {a.shape[1]} but others {b.shape[1]}")
    return (a @ b.T).max(1)


def recovered_fraction(true_dirs, learned_rows, threshold: float = 0.9) -> float:
    """Share of ground-truth directions matched by some learned row with cosine > ``threshold``."""
    if len(true_dirs) == 0:
        return float("nan")
    return float((max_cosine(true_dirs, learned_rows) > threshold).mean())


def classify_latents(rows, world: SyntheticWorld, threshold: float = 0.9) -> np.ndarray:
    """Label each decoder row ``"atom"``, ``"entity"``, ``"rare"`` (cos > threshold to one) or ``"other"``."""
    labels = np.full(len(_rows(rows)), "other", dtype=object)
    best = np.full(len(labels), threshold)
    for name, dirs in (("atom", world.atoms), ("entity", world.entities), ("rare", world.rare)):
        if len(dirs):
            c = max_cosine(rows, dirs)
            labels[c > best], best = name, np.maximum(best, c)
    return labels


# ----------------------------------------------------------------------------- stitching
@dataclass
class JumpReLUDictionary:
    r"""A JumpReLU SAE with per-latent thresholds: $f_i=z_i\mathbb 1[z_i>\theta_i]$,
    $z=(x-b_{dec})W_{enc}+b_{enc}$, $\hat x=b_{dec}+fW_{dec}$: the inference form of a BatchTopK SAE,
    and the form in which latents of two SAEs can be mixed (each keeps its own threshold)."""

    W_enc: np.ndarray
    b_enc: np.ndarray
    W_dec: np.ndarray
    b_dec: np.ndarray
    thresholds: np.ndarray

    def __post_init__(self):
        if self.W_enc.shape[1] != self.W_dec.shape[0]:
            raise ValueError(f"decoder width {self.W_dec.shape[0]} does not match encoder width {self.W_enc.shape[1]}")

    @property
    def width(self) -> int:
        return self.W_dec.shape[0]

    def encode(self, X: np.ndarray) -> np.ndarray:
        z = (X - self.b_dec) @ self.W_enc + self.b_enc
        return z * (z > self.thresholds)

    def reconstruct(self, X: np.ndarray) -> np.ndarray:
        return self.encode(X) @ self.W_dec + self.b_dec

    def subset(self, keep) -> "JumpReLUDictionary":
        keep = np.asarray(keep)
        return JumpReLUDictionary(self.W_enc[:, keep], self.b_enc[keep], self.W_dec[keep], self.b_dec, self.thresholds[keep])


def _union(A: JumpReLUDictionary, B: JumpReLUDictionary) -> JumpReLUDictionary:
    r"""All latents of A and B in one dictionary with A's $b_{dec}$; B's encoder biases absorb the change
    of centring, $b^B_{enc}+(b^A_{dec}-b^B_{dec})W^B_{enc}$, so every B latent fires exactly as in B."""
    if A.W_dec.shape[1] != B.W_dec.shape[1]:
        raise ValueError(f"cannot stitch SAEs of different input dimension ({A.W_dec.shape[1]} vs {B.W_dec.shape[1]})")
    b_enc_B = B.b_enc + (A.b_dec - B.b_dec) @ B.W_enc
    return JumpReLUDictionary(np.hstack([A.W_enc, B.W_enc]), np.concatenate([A.b_enc, b_enc_B]),
                              np.vstack([A.W_dec, B.W_dec]), A.b_dec, np.concatenate([A.thresholds, B.thresholds]))


def _dictionary(model) -> JumpReLUDictionary:
    return model if isinstance(model, JumpReLUDictionary) else model.as_dictionary()


def _mse(D: JumpReLUDictionary, X: np.ndarray) -> float:
    return float(((X - D.reconstruct(X)) ** 2).sum(1).mean())


def insertion_deltas(small, large, X) -> np.ndarray:
    r"""$\Delta\mathrm{MSE}_j=\mathrm{MSE}(A\cup\{j\})-\mathrm{MSE}(A)$ for every latent $j$ of the large SAE $B$,
    with MSE the mean over samples of $\|x-\hat x\|^2$. With $r=x-\hat x_A$ and $B$'s activation $f_j$,
    $\Delta_j=\overline{f_j^2-2f_j\langle r,d_j\rangle}$ (unit $d_j$), computed for all $j$ at once."""
    A, B = _dictionary(small), _dictionary(large)
    X = _as_tensor(X).numpy().astype(np.float64)
    U = _union(A, B)
    r = X - A.reconstruct(X)
    fB = U.encode(X)[:, A.width:]
    dB = B.W_dec.astype(np.float64)
    norms2 = (dB ** 2).sum(1)
    return (fB ** 2 * norms2 - 2 * fB * (r @ dB.T)).mean(0)


def swap_groups(small, large, candidates, tau: float = 0.5):
    r"""Groups for swapping: connected components of the bipartite graph that joins B latent $j$ (among
    ``candidates``) and A latent $i$ when $\cos(d^B_j, d^A_i)>\tau$ (every $j$ is joined at least to its
    argmax). Returns a list of ``(A_indices, B_indices)``."""
    A, B = _dictionary(small), _dictionary(large)
    candidates = np.asarray(candidates, dtype=int)
    cos = _unit(B.W_dec[candidates]) @ _unit(A.W_dec).T
    edges = cos > tau
    edges[np.arange(len(candidates)), cos.argmax(1)] = True
    parent = list(range(A.width + len(candidates)))

    def find(u):
        while parent[u] != u:
            parent[u] = parent[parent[u]]
            u = parent[u]
        return u

    for jj, i in zip(*np.nonzero(edges)):
        parent[find(A.width + jj)] = find(int(i))
    comps: dict[int, tuple[list, list]] = {}
    for jj, j in enumerate(candidates):
        comps.setdefault(find(A.width + jj), ([], []))[1].append(int(j))
    for i in range(A.width):
        if find(i) in comps:
            comps[find(i)][0].append(i)
    return [(sorted(a), sorted(b)) for a, b in comps.values()]


def stitching_path(small, large, X, tau: float = 0.5, greedy: bool = True, stop: bool = False):
    r"""A path of stitched SAEs from A (small) to B (large); returns ``(mse_path, moves)``.

    Moves: *insert* one B latent with $\Delta\mathrm{MSE}<0$ (novel), or *swap* a group (remove its A
    latents, add its B latents; groups from :func:`swap_groups` over the other B latents). Each A
    latent in no group stays. With ``greedy`` the move that lowers the MSE most is taken at each step;
    with ``stop`` (the research note's fix) the path ends when no remaining move lowers the MSE, so it
    decreases at every step by construction and the question is how close to B it gets; without
    ``stop`` the least harmful move is taken when none helps, until every move is made. Without
    ``greedy``: the naive order, novel latents by $\Delta$, then groups by size, every move.
    """
    A, B = _dictionary(small), _dictionary(large)
    X = _as_tensor(X).numpy().astype(np.float64)
    U = _union(A, B)
    delta = insertion_deltas(A, B, X)
    novel = np.flatnonzero(delta < 0)
    groups = swap_groups(A, B, np.flatnonzero(delta >= 0), tau)
    moves = [("insert", [], [int(j)]) for j in novel[np.argsort(delta[novel])]]
    moves += [("swap", a, b) for a, b in sorted(groups, key=lambda g: len(g[1]))]
    Z = (X - U.b_dec) @ U.W_enc + U.b_enc
    F = Z * (Z > U.thresholds)
    active = np.zeros(U.width, bool)
    active[:A.width] = True

    def mse_of(mask):
        return float(((X - U.b_dec - F[:, mask] @ U.W_dec[mask]) ** 2).sum(1).mean())

    path, taken = [mse_of(active)], []
    remaining = list(moves)
    while remaining:
        if greedy:
            trial = []
            for kind, a, b in remaining:
                m = active.copy(); m[a] = False; m[[A.width + j for j in b]] = True
                trial.append(mse_of(m))
            pick = int(np.argmin(trial))
            if stop and trial[pick] >= path[-1]:
                break
        else:
            pick = 0
        kind, a, b = remaining.pop(pick)
        active[a] = False
        active[[A.width + j for j in b]] = True
        path.append(mse_of(active))
        taken.append((kind, a, b))
    return np.array(path), taken


# ----------------------------------------------------------------------------- meta-SAE analysis
def meta_decomposition(meta_sae: SparseAutoencoder, rows) -> np.ndarray:
    r"""Meta-activations $g(d_j)$ (rows x meta width) of decoder rows under a meta-SAE (inference form)."""
    with torch.no_grad():
        return meta_sae.encode(_as_tensor(rows, "rows"), batch=False).numpy()


def atom_hit_fraction(meta_sae: SparseAutoencoder, rows, true_atom_sets, atoms, threshold: float = 0.8) -> np.ndarray:
    r"""For each row $j$ with true atom set $S_j$: the share of $S_j$ matched (cos > ``threshold``) by
    one of the meta-latents active on $d_j$."""
    g = meta_decomposition(meta_sae, rows)
    cos = _unit(np.asarray(atoms)) @ _unit(meta_sae.W_dec.detach().numpy()).T   # atoms x meta
    out = []
    for gj, S in zip(g, true_atom_sets):
        act = np.flatnonzero(gj > 0)
        out.append(float(np.mean([(cos[a, act] > threshold).any() if act.size else False for a in S])))
    return np.array(out)


# ----------------------------------------------------------------------------- the book's experiment
def _spearman(a, b) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def run_experiments(seeds, replicates: int = 1, widths=(16, 32, 64, 128), k: int = 2, steps: int = 3000,
                    n_train: int = 40000, n_test: int = 4000, topk_width: int = 64, stitch=(16, 64),
                    meta_width: int = 20, meta_k: int = 3, meta_steps: int = 3000, n_gt_entities: int = 400) -> list[dict]:
    r"""The chapter's reproduction on ``replicates`` worlds per seed (world $r$ of seed $s$ is drawn from
    ``np.random.default_rng([s, r])``): for every world, BatchTopK SAEs of every width (and one TopK),
    the stitching analysis of ``stitch = (A, B)`` on alive B latents, and meta-SAEs on the widest SAE's
    alive decoder rows ($b_{dec}=0$) and on ``n_gt_entities`` ground-truth entity vectors ($b_{dec}=0$
    and a learned, mean-initialised $b_{dec}$). All worlds' SAEs of one kind and width are trained in one
    batched loop (:func:`train_saes`). Returns one dict of plain numbers and arrays per world (cacheable)."""
    keys = [(int(s), r) for s in seeds for r in range(int(replicates))]
    if not keys:
        raise ValueError("seeds must be non-empty and replicates >= 1")
    train_seeds = [1000 * s + r for s, r in keys]
    outs = []
    for s, r in keys:
        rng = np.random.default_rng([s, r])
        world = make_world(rng)
        X, Xt = sample_activations(world, n_train, rng), sample_activations(world, n_test, rng)
        outs.append({"seed": s, "replicate": r, "world": world, "X": X, "Xt": Xt, "sweep": [], "saes": {}})
    for w in widths:
        saes, _ = train_saes([o["X"] for o in outs], w, k, "batchtopk", steps=steps, seeds=train_seeds)
        for o, m in zip(outs, saes):
            o["saes"][w] = m
    topk_saes, _ = train_saes([o["X"] for o in outs], topk_width, k, "topk", steps=steps, seeds=train_seeds)
    meta_inputs = []
    for o, topk_sae in zip(outs, topk_saes):
        world, Xt = o["world"], o["Xt"]
        for name, m in [*((w, o["saes"][w]) for w in widths), ("topk", topk_sae)]:
            alive = alive_latents(m, Xt)
            rows = m.W_dec.detach().numpy()[alive]
            o["sweep"].append(dict(width=m.width, kind=m.kind, nmse=nmse(m, Xt), l0=mean_l0(m, Xt),
                                   alive=int(alive.sum()), atoms=recovered_fraction(world.atoms, rows),
                                   entities=recovered_fraction(world.entities, rows),
                                   rare=recovered_fraction(world.rare, rows)))
        # stitching: A small, B large, alive B latents only
        A, B = o["saes"][stitch[0]], o["saes"][stitch[1]]
        alive_B = alive_latents(B, Xt)
        delta = insertion_deltas(A, B, Xt)
        st = dict(delta=delta[alive_B], maxcos=max_cosine(B, A)[alive_B],
                  label=classify_latents(B.W_dec.detach().numpy()[alive_B], world),
                  alive_B=alive_B, nmse_A=nmse(A, Xt), nmse_B=nmse(B, Xt))
        B_alive = B.as_dictionary().subset(np.flatnonzero(alive_B))
        Xs = Xt[:2000]
        path, moves = stitching_path(A, B_alive, Xs, greedy=True, stop=True)
        st.update(path_greedy=path, swap_sizes=[len(b) for kind, a, b in moves if kind == "swap"],
                  mse_B=_mse(B_alive, Xs.astype(np.float64)))
        st["path_full"], _ = stitching_path(A, B_alive, Xs, greedy=True, stop=False)
        st["path_naive"], _ = stitching_path(A, B_alive, Xs, greedy=False)
        st["spearman"] = _spearman(st["maxcos"], st["delta"])
        o["stitch"] = st
        big = o["saes"][max(widths)]
        alive = alive_latents(big, Xt)
        meta_inputs.append(big.W_dec.detach().numpy()[alive])
    # meta-SAEs on the alive decoder rows of the widest SAE, one per world, in one batched loop
    metas, _ = train_meta_saes(meta_inputs, meta_width, meta_k, steps=meta_steps, seeds=train_seeds)
    gt_worlds = [make_world(np.random.default_rng([s, r, 1]), n_entities=n_gt_entities) for s, r in keys]
    gt = {fixed: train_meta_saes([g.entities for g in gt_worlds], meta_width, meta_k, steps=meta_steps,
                                 seeds=train_seeds, fix_b_dec_zero=fixed)[0] for fixed in (True, False)}
    for i, (o, meta, rows) in enumerate(zip(outs, metas, meta_inputs)):
        world = o["world"]
        with torch.no_grad():
            rec = meta(torch.as_tensor(rows), batch=False).numpy()
        labels = classify_latents(rows, world)
        ent = labels == "entity"
        sets = world.entity_atoms[np.argmax(_unit(rows[ent]) @ world.entities.T, 1)] if ent.any() else np.zeros((0, 3), int)
        small = o["saes"][min(widths)]
        o["meta"] = dict(fve=float(1 - ((rows - rec) ** 2).sum() / ((rows - rows.mean(0)) ** 2).sum()),
                         atoms=recovered_fraction(world.atoms, meta, 0.8),
                         hit=float(atom_hit_fraction(meta, rows[ent], sets, world.atoms).mean()) if ent.any() else float("nan"),
                         maxcos_small=float(max_cosine(meta, small).mean()), n_rows=int(len(rows)),
                         n_entity_rows=int(ent.sum()), model=meta, rows=rows, labels=labels,
                         gt_atoms_zero=recovered_fraction(gt_worlds[i].atoms, gt[True][i], 0.8),
                         gt_atoms_mean=recovered_fraction(gt_worlds[i].atoms, gt[False][i], 0.8))
        del o["X"], o["Xt"]
    return outs


def run_experiment(seed: int, **kw) -> dict:
    r"""One world of :func:`run_experiments` (seed ``seed``, replicate 0)."""
    return run_experiments([seed], replicates=1, **kw)[0]


def mean_ci(values, level: float = 0.95) -> tuple[float, float, float]:
    r"""Mean of ``values`` (NaN ignored) and the two-sided Student-$t$ interval at ``level``:
    $\bar v \pm t_{(1+\text{level})/2,\,n-1}\,s/\sqrt n$. Returns ``(mean, low, high)``; scipy gives $t$."""
    from scipy import stats

    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size < 2:
        raise ValueError(f"mean_ci needs at least two finite values, got {v.size}")
    m, half = float(v.mean()), float(stats.t.ppf((1 + level) / 2, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size))
    return m, m - half, m + half


def summarize(results: list[dict]) -> "pandas.DataFrame":
    """One row per world (seed, replicate) of :func:`run_experiments` results: the numbers the claims read."""
    import pandas as pd

    rows = []
    for r in results:
        sw = {(s["width"], s["kind"]): s for s in r["sweep"]}
        bt, tk = sw[(64, "batchtopk")], sw[(64, "topk")]
        st, me = r["stitch"], r["meta"]
        frac = lambda c: float((st["delta"][st["label"] == c] < 0).mean()) if (st["label"] == c).any() else float("nan")
        steps = np.diff(st["path_greedy"])
        rows.append(dict(
            seed=r["seed"], replicate=r.get("replicate", 0), nmse_batchtopk=bt["nmse"], nmse_topk=tk["nmse"], l0_batchtopk=bt["l0"], l0_topk=tk["l0"],
            atoms_small=sw[(16, "batchtopk")]["atoms"], atoms_64=bt["atoms"], entities_small=sw[(16, "batchtopk")]["entities"],
            entities_64=bt["entities"], rare_64=bt["rare"],
            both_max=max(min(s["atoms"], s["entities"]) for s in r["sweep"] if s["kind"] == "batchtopk"),
            improve_rare=frac("rare"), improve_entity=frac("entity"), improve_other=frac("other"),
            n_rare=int((st["label"] == "rare").sum()), n_entity=int((st["label"] == "entity").sum()),
            n_other=int((st["label"] == "other").sum()), n_atom=int((st["label"] == "atom").sum()),
            spearman=st["spearman"], monotone_greedy=float(np.mean(steps <= 1e-4)) if len(steps) else 1.0,
            monotone_naive=float(np.mean(np.diff(st["path_naive"]) <= 1e-4)),
            monotone_full=float(np.mean(np.diff(st["path_full"]) <= 1e-4)) if "path_full" in st else float("nan"),
            full_end=float(st["path_full"][-1]) if "path_full" in st else float("nan"),
            path_start=float(st["path_greedy"][0]), path_end=float(st["path_greedy"][-1]), mse_B=st["mse_B"],
            largest_group=max(st["swap_sizes"]) if st["swap_sizes"] else 0, n_moves=len(steps),
            meta_fve=me["fve"], meta_atoms=me["atoms"], meta_hit=me["hit"], meta_maxcos_small=me["maxcos_small"],
            meta_rows=me["n_rows"], meta_entity_rows=me["n_entity_rows"],
            gt_atoms_zero=me["gt_atoms_zero"], gt_atoms_mean=me["gt_atoms_mean"]))
    return pd.DataFrame(rows).set_index(["seed", "replicate"])
