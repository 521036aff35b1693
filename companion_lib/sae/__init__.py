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

Only numpy and torch are used at run time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

__all__ = [
    "SyntheticWorld", "make_world", "sample_activations", "SparseAutoencoder", "JumpReLUDictionary",
    "batch_topk", "topk_per_sample", "train_sae", "train_meta_sae", "nmse", "mean_l0", "alive_latents",
    "max_cosine", "recovered_fraction", "classify_latents", "insertion_deltas", "stitching_path",
    "swap_groups", "meta_decomposition", "atom_hit_fraction", "run_experiment", "summarize",
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


def train_sae(X, width: int, k: int, kind: str = "batchtopk", steps: int = 3000, batch_size: int = 256,
              lr: float = 3e-3, k_aux: int = 16, aux_alpha: float = 1 / 32, dead_after: int = 200,
              fix_b_dec_zero: bool = False, seed: int = 0, threshold_momentum: float = 0.99):
    r"""Train a TopK/BatchTopK SAE with Adam on the rows of ``X``; returns ``(sae, history)``.

    Loss per batch: $\frac1B\sum_b\|x_b-\hat x_b\|^2+\alpha\frac1B\sum_b\|e_b-\hat e_b\|^2$, where
    $e=(x-\hat x)$ is detached and $\hat e = \mathrm{TopK}_{k_{aux}}(z_{\text{dead}})W_{dec}$ uses only
    latents that have not fired for ``dead_after`` steps (AuxK). After each step the decoder gradient
    is projected orthogonal to the rows before Adam and the rows are renormalised to unit norm.
    $b_{dec}$ starts at the data mean (or is fixed at zero with ``fix_b_dec_zero``, as for meta-SAEs).
    BatchTopK's inference threshold $\theta$ is an exponential moving average (``threshold_momentum``)
    of the smallest activation kept by batch top-k in each batch.
    """
    X = _as_tensor(X, "X")
    k = _check_k(k, width)
    if steps < 1 or batch_size < 1:
        raise ValueError(f"steps and batch_size must be positive, got {steps}, {batch_size}")
    gen = torch.Generator().manual_seed(int(seed))
    n, d = X.shape
    W_dec = torch.nn.functional.normalize(torch.randn(width, d, generator=gen), dim=1)
    b_dec = torch.zeros(d) if fix_b_dec_zero else X.mean(0)
    sae = SparseAutoencoder(d, width, k, kind, W_enc=W_dec.T.clone(), W_dec=W_dec, b_dec=b_dec)
    params = [sae.W_enc, sae.b_enc, sae.W_dec] + ([] if fix_b_dec_zero else [sae.b_dec])
    opt = torch.optim.Adam(params, lr=lr)
    last_fired = torch.zeros(width, dtype=torch.long)
    history, theta = TrainHistory(), None
    k_aux = min(int(k_aux), width)
    for step in range(steps):
        idx = torch.randint(0, n, (min(batch_size, n),), generator=gen)
        x = X[idx]
        z = sae.pre_activations(x)
        f = batch_topk(z, k) if kind == "batchtopk" else topk_per_sample(z, k)
        x_hat = sae.decode(f)
        loss = (x - x_hat).pow(2).sum(-1).mean()
        fired = (f > 0).any(0)
        last_fired[fired] = step
        dead = (step - last_fired) >= dead_after
        if dead.any() and aux_alpha > 0:
            e = (x - x_hat).detach()
            z_dead = torch.relu(z[:, dead])
            top = torch.topk(z_dead, min(k_aux, int(dead.sum())), dim=-1)
            f_aux = torch.zeros_like(z_dead).scatter(-1, top.indices, top.values)
            loss = loss + aux_alpha * (e - f_aux @ sae.W_dec[dead]).pow(2).sum(-1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        with torch.no_grad():
            W, g = sae.W_dec, sae.W_dec.grad
            g -= (g * W).sum(1, keepdim=True) * W
        opt.step()
        with torch.no_grad():
            sae.W_dec /= sae.W_dec.norm(dim=1, keepdim=True)
            if kind == "batchtopk":
                kept = f[f > 0]
                if kept.numel():
                    m = float(kept.min())
                    theta = m if theta is None else threshold_momentum * theta + (1 - threshold_momentum) * m
        history.loss.append(float(loss.detach()))
        history.dead.append(int(dead.sum()))
    if kind == "batchtopk" and theta is not None:
        sae.threshold.fill_(theta)
    return sae, history


def train_meta_sae(decoder_rows, width: int, k: int = 3, steps: int = 3000, lr: float = 3e-3,
                   fix_b_dec_zero: bool = True, seed: int = 0, **kw):
    r"""A meta-SAE: a BatchTopK SAE whose data points are the unit decoder rows $d^B_j$ of another SAE,
    trained full-batch (all rows in every step). $b_{dec}$ is fixed at zero by default: decoder
    directions are not centred data, and subtracting their mean removes the shared atoms."""
    rows = _as_tensor(decoder_rows, "decoder_rows")
    return train_sae(rows, width, k, "batchtopk", steps=steps, batch_size=rows.shape[0], lr=lr,
                     fix_b_dec_zero=fix_b_dec_zero, seed=seed, **kw)


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


def stitching_path(small, large, X, tau: float = 0.5, greedy: bool = True):
    r"""A path of stitched SAEs from A (small) to B (large); returns ``(mse_path, moves)``.

    Moves: *insert* one B latent with $\Delta\mathrm{MSE}<0$ (novel), or *swap* a group (remove its A
    latents, add its B latents; groups from :func:`swap_groups` over the other B latents). Each A
    latent in no group stays. With ``greedy`` the move that lowers the MSE most is taken at each step
    (taking the least harmful one when none lowers it), until every move is made; without it, the
    naive order: novel latents by $\Delta$, then groups by size.
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


def run_experiment(seed: int, widths=(16, 32, 64, 128), k: int = 2, steps: int = 3000, n_train: int = 40000,
                   n_test: int = 4000, topk_width: int = 64, stitch=(16, 64), meta_width: int = 20,
                   meta_k: int = 3, meta_steps: int = 3000, n_gt_entities: int = 400) -> dict:
    r"""One seed of the chapter's reproduction: a world, BatchTopK SAEs of every width (and one TopK),
    the stitching analysis of ``stitch = (A, B)``, and meta-SAEs on the widest SAE's alive decoder rows
    ($b_{dec}=0$), on ``n_gt_entities`` ground-truth entity vectors ($b_{dec}=0$ and a learned, mean-
    initialised $b_{dec}$). Returns a dict of plain numbers and arrays (cacheable)."""
    rng = np.random.default_rng(seed)
    world = make_world(rng)
    X, Xt = sample_activations(world, n_train, rng), sample_activations(world, n_test, rng)
    out = {"seed": seed, "world": world, "sweep": [], "saes": {}}
    for w in widths:
        sae, _ = train_sae(X, w, k, "batchtopk", steps=steps, seed=seed)
        out["saes"][w] = sae
    topk_sae, _ = train_sae(X, topk_width, k, "topk", steps=steps, seed=seed)
    for name, sae in [*((w, out["saes"][w]) for w in widths), ("topk", topk_sae)]:
        alive = alive_latents(sae, Xt)
        rows = sae.W_dec.detach().numpy()[alive]
        out["sweep"].append(dict(width=sae.width, kind=sae.kind, nmse=nmse(sae, Xt), l0=mean_l0(sae, Xt),
                                 alive=int(alive.sum()), atoms=recovered_fraction(world.atoms, rows),
                                 entities=recovered_fraction(world.entities, rows),
                                 rare=recovered_fraction(world.rare, rows)))
    # stitching: A small, B large, alive B latents only
    A, B = out["saes"][stitch[0]], out["saes"][stitch[1]]
    alive_B = alive_latents(B, Xt)
    delta = insertion_deltas(A, B, Xt)
    out["stitch"] = dict(delta=delta[alive_B], maxcos=max_cosine(B, A)[alive_B],
                         label=classify_latents(B.W_dec.detach().numpy()[alive_B], world),
                         alive_B=alive_B, nmse_A=nmse(A, Xt), nmse_B=nmse(B, Xt))
    B_alive = B.as_dictionary().subset(np.flatnonzero(alive_B))
    for greedy in (True, False):
        path, moves = stitching_path(A, B_alive, Xt[:2000], greedy=greedy)
        out["stitch"]["path_greedy" if greedy else "path_naive"] = path
        if greedy:
            out["stitch"]["swap_sizes"] = [len(b) for kind, a, b in moves if kind == "swap"]
            out["stitch"]["mse_B"] = _mse(B_alive, Xt[:2000].astype(np.float64))
    out["stitch"]["spearman"] = _spearman(out["stitch"]["maxcos"], out["stitch"]["delta"])
    # meta-SAEs
    big = out["saes"][max(widths)]
    alive = alive_latents(big, Xt)
    rows = big.W_dec.detach().numpy()[alive]
    meta, _ = train_meta_sae(rows, meta_width, meta_k, steps=meta_steps, seed=seed)
    with torch.no_grad():
        rec = meta(torch.as_tensor(rows), batch=False).numpy()
    labels = classify_latents(rows, world)
    ent = labels == "entity"
    sets = world.entity_atoms[np.argmax(_unit(rows[ent]) @ world.entities.T, 1)] if ent.any() else np.zeros((0, 3), int)
    small = out["saes"][min(widths)]
    out["meta"] = dict(fve=float(1 - ((rows - rec) ** 2).sum() / ((rows - rows.mean(0)) ** 2).sum()),
                       atoms=recovered_fraction(world.atoms, meta, 0.8),
                       hit=float(atom_hit_fraction(meta, rows[ent], sets, world.atoms).mean()) if ent.any() else float("nan"),
                       maxcos_small=float(max_cosine(meta, small).mean()), n_rows=int(len(rows)),
                       n_entity_rows=int(ent.sum()), model=meta, rows=rows, labels=labels)
    gt_rng = np.random.default_rng([seed, 1])
    gt_world = make_world(gt_rng, n_entities=n_gt_entities)
    for fixed in (True, False):
        m, _ = train_meta_sae(gt_world.entities, meta_width, meta_k, steps=meta_steps, seed=seed, fix_b_dec_zero=fixed)
        out["meta"]["gt_atoms_zero" if fixed else "gt_atoms_mean"] = recovered_fraction(gt_world.atoms, m, 0.8)
    return out


def summarize(results: list[dict]) -> "pandas.DataFrame":
    """One row per seed of :func:`run_experiment` results: the numbers the chapter's claims read."""
    import pandas as pd

    rows = []
    for r in results:
        sw = {(s["width"], s["kind"]): s for s in r["sweep"]}
        bt, tk = sw[(64, "batchtopk")], sw[(64, "topk")]
        st, me = r["stitch"], r["meta"]
        frac = lambda c: float((st["delta"][st["label"] == c] < 0).mean()) if (st["label"] == c).any() else float("nan")
        steps = np.diff(st["path_greedy"])
        rows.append(dict(
            seed=r["seed"], nmse_batchtopk=bt["nmse"], nmse_topk=tk["nmse"], l0_batchtopk=bt["l0"], l0_topk=tk["l0"],
            atoms_small=sw[(16, "batchtopk")]["atoms"], atoms_64=bt["atoms"], entities_small=sw[(16, "batchtopk")]["entities"],
            entities_64=bt["entities"], rare_64=bt["rare"],
            both_max=max(min(s["atoms"], s["entities"]) for s in r["sweep"] if s["kind"] == "batchtopk"),
            improve_rare=frac("rare"), improve_entity=frac("entity"), improve_other=frac("other"),
            n_rare=int((st["label"] == "rare").sum()), n_entity=int((st["label"] == "entity").sum()),
            n_other=int((st["label"] == "other").sum()), n_atom=int((st["label"] == "atom").sum()),
            spearman=st["spearman"], monotone_greedy=float(np.mean(steps <= 1e-4)),
            monotone_naive=float(np.mean(np.diff(st["path_naive"]) <= 1e-4)),
            path_start=float(st["path_greedy"][0]), path_end=float(st["path_greedy"][-1]), mse_B=st["mse_B"],
            largest_group=max(st["swap_sizes"]) if st["swap_sizes"] else 0, n_moves=len(steps),
            meta_fve=me["fve"], meta_atoms=me["atoms"], meta_hit=me["hit"], meta_maxcos_small=me["maxcos_small"],
            meta_rows=me["n_rows"], meta_entity_rows=me["n_entity_rows"],
            gt_atoms_zero=me["gt_atoms_zero"], gt_atoms_mean=me["gt_atoms_mean"]))
    return pd.DataFrame(rows).set_index("seed")
