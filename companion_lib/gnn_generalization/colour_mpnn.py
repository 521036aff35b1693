r"""The MPNN of :mod:`.mpnn` computed on WL colours, for many independent replicates at once.

An MPNN whose vertex features are a function of the initial colours (constant 1, or rooted homomorphism
counts for an $\mathcal F$-MPNN) gives two vertices the same state after $t$ layers whenever 1-WL (or
$\mathcal F$-WL) gives them the same colour after $t$ rounds: the state of $v$ at layer $t$ depends only on
its own state and the multiset of its neighbours' states at layer $t-1$, which is what the colour of round
$t$ records. So the network can be evaluated once per *colour* instead of once per vertex:

$$h_t(c) = \mathrm{ReLU}\Big(W_1\,h_{t-1}(\mathrm{parent}(c)) + W_2\sum_{c'} N_t(c, c')\,h_{t-1}(c') + b\Big),
\qquad \text{pooled}(G) = \sum_c \lambda(G)_c\, h_L(c),$$

where $\mathrm{parent}(c)$ is the colour of round $t-1$ that $c$ refines, $N_t(c, c')$ the number of
neighbours of colour $c'$ that a vertex of colour $c$ has, and $\lambda(G)$ the colour histogram of
:func:`~.wl.wl_histograms`: the factorisation $\phi = f\circ\lambda$ of Lemma 4.2, computed. It is the same
function as :class:`~.mpnn.MPNN` (the unit tests compare the two), with fewer rows at the first layers
(about a dozen degree colours after one round instead of thousands of vertices).

:class:`ReplicateMPNN` stacks the weights of ``R`` independent networks (each initialised exactly as
:class:`~.mpnn.MPNN` under its own ``torch.manual_seed``) and evaluates them with batched matrix products;
each replicate has its own graphs. The training loss is the sum of the replicates' mean losses, so each
replicate's gradient is its own, and Adam's update is elementwise: training them together is training them
apart, up to floating-point rounding (which training amplifies over many epochs, as any change of summation
order would).
"""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .graphs import check_graphs
from .mpnn import MPNN, TrainResult
from .wl import initial_colors, wl_colors

__all__ = ["ColourGraphs", "colour_graphs", "ColourBatch", "stack_colour_graphs", "ReplicateMPNN",
           "train_replicates"]


@dataclass
class ColourGraphs:
    """Graphs in WL-compressed form: everything an MPNN of ``layers`` layers needs, per colour.

    ``init`` holds the input features of each round-0 colour; ``parent[t]`` and ``nbr[t]`` the refinement
    and the neighbour counts $N_{t+1}$ as (row, column, count) triplets; ``hists[t]`` the colour histograms
    after ``t`` rounds (``hists[-1]`` is :func:`~.wl.wl_histograms` of the graphs after ``layers`` rounds).
    """

    init: np.ndarray
    parent: list
    nbr: list
    hists: list
    y: np.ndarray | None = None

    @property
    def layers(self) -> int:
        return len(self.parent)

    @property
    def n_graphs(self) -> int:
        return self.hists[0].shape[0]

    @property
    def n_colours(self) -> list[int]:
        return [h.shape[1] for h in self.hists]

    @property
    def hist(self) -> np.ndarray:
        r"""The bounding encoder $\lambda$: colour histograms after ``layers`` rounds."""
        return self.hists[-1]

    def truncate(self, layers: int) -> "ColourGraphs":
        """The same graphs for an MPNN of fewer layers (WL colours of round $t$ do not depend on later rounds)."""
        if not 0 < layers <= self.layers:
            raise ValueError(f"layers must lie in 1..{self.layers}, got {layers}")
        return ColourGraphs(self.init, self.parent[:layers], self.nbr[:layers], self.hists[:layers + 1], self.y)


def colour_graphs(graphs, layers: int, patterns=(), y=None) -> ColourGraphs:
    r"""The WL-compressed form of ``graphs`` for an MPNN of ``layers`` layers (features as in
    :func:`~.mpnn.make_batch`: 1 and $\log(1+\text{count})$ of each pattern)."""
    graphs = check_graphs(graphs)
    if isinstance(layers, bool) or not isinstance(layers, (int, np.integer)) or layers < 1:
        raise ValueError(f"layers must be a positive integer, got {layers!r}")
    if y is not None and len(y) != len(graphs):
        raise ValueError(f"y must hold one label per graph: got {len(y)} labels for {len(graphs)} graphs")
    history = wl_colors(graphs, layers, patterns)
    labels = initial_colors(graphs, patterns)
    n0 = 1 + max(int(c.max()) for c in history[0])
    init = np.zeros((n0, 1 + len(patterns)))
    for labs, cols in zip(labels, history[0]):
        for lab, c in zip(labs, cols):
            init[c] = [1.0] + [np.log1p(v) for v in lab]
    index = [{v: i for i, v in enumerate(G.nodes)} for G in graphs]
    neighbours = [[[index[g][u] for u in G.neighbors(v)] for v in G.nodes] for g, G in enumerate(graphs)]
    parent, nbr = [], []
    for t in range(1, int(layers) + 1):
        n_t = 1 + max(int(c.max()) for c in history[t])
        par = np.full(n_t, -1, dtype=np.int64)
        rows, cols, counts = [], [], []
        for g in range(len(graphs)):
            cur, prev = history[t][g], history[t - 1][g]
            for i, c in enumerate(cur):
                if par[c] >= 0:
                    continue                          # every vertex of colour c has the same parent and counts
                par[c] = prev[i]
                for c2, k in sorted(Counter(int(prev[j]) for j in neighbours[g][i]).items()):
                    rows.append(int(c))
                    cols.append(c2)
                    counts.append(k)
        parent.append(par)
        nbr.append((np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64),
                    np.asarray(counts, dtype=float)))
    hists = []
    for colours in history:
        H = np.zeros((len(graphs), 1 + max(int(c.max()) for c in colours)))
        for g, c in enumerate(colours):
            np.add.at(H[g], c, 1.0)
        hists.append(H)
    return ColourGraphs(init=init, parent=parent, nbr=nbr, hists=hists,
                        y=None if y is None else np.asarray(y, dtype=np.int64))


class _SparseMatmul(torch.autograd.Function):
    """``A @ x`` for a constant sparse CSR matrix ``A`` whose transpose is stored too (torch would transpose
    ``A`` at every backward pass)."""

    @staticmethod
    def forward(ctx, A, At, x):
        ctx.At = At
        return A @ x

    @staticmethod
    def backward(ctx, grad):
        return None, None, ctx.At @ grad


def _csr(rows, cols, values, shape) -> tuple[torch.Tensor, torch.Tensor]:
    """The CSR matrix with the given (row, column, value) triplets, and its transpose."""
    coo = torch.sparse_coo_tensor(torch.stack([torch.as_tensor(rows), torch.as_tensor(cols)]),
                                  torch.as_tensor(values, dtype=torch.float32), shape, check_invariants=True).coalesce()
    with warnings.catch_warnings():          # torch calls its sparse CSR support "beta"; the tests check it here
        warnings.simplefilter("ignore", UserWarning)
        return coo.to_sparse_csr(), coo.t().coalesce().to_sparse_csr()


@dataclass
class ColourBatch:
    """``R`` :class:`ColourGraphs` (one per replicate, the same number of graphs and layers), padded to a
    common number of colours per round, as tensors: per layer one sparse matrix that maps the previous
    round's rows (interleaved: own-state and neighbour-sum parts) to the new round's colours, and one that
    pools the last round's colours into graphs (the histograms)."""

    init: torch.Tensor          # (R, C_0, F)
    layers: list                # per layer: (M, M^T), M of shape (R C_t, 2 R C_{t-1})
    pool: tuple                 # (Hist, Hist^T), Hist of shape (R G, R C_L)
    sizes: list                 # C_t per round (padded)
    n_graphs: int
    y: torch.Tensor | None      # (R, G)


def stack_colour_graphs(items) -> ColourBatch:
    """Stack the :class:`ColourGraphs` of ``R`` replicates into one :class:`ColourBatch`."""
    items = list(items)
    if not items:
        raise ValueError("need at least one replicate")
    R, G, L = len(items), items[0].n_graphs, items[0].layers
    if any(it.n_graphs != G or it.layers != L or it.init.shape[1] != items[0].init.shape[1] for it in items):
        raise ValueError("every replicate needs the same number of graphs, layers and input features")
    sizes = [max(it.n_colours[t] for it in items) for t in range(L + 1)]
    init = torch.zeros(R, sizes[0], items[0].init.shape[1])
    for r, it in enumerate(items):
        init[r, :len(it.init)] = torch.as_tensor(it.init, dtype=torch.float32)
    layers = []
    for t in range(L):
        prev, cur = sizes[t], sizes[t + 1]
        rows, cols, vals = [], [], []
        for r, it in enumerate(items):
            own = np.arange(len(it.parent[t]))
            a, b, k = it.nbr[t]
            rows += [own + r * cur, a + r * cur]
            cols += [2 * (it.parent[t] + r * prev), 2 * (b + r * prev) + 1]   # even: own state, odd: neighbours
            vals += [np.ones(len(own)), k]
        layers.append(_csr(np.concatenate(rows), np.concatenate(cols), np.concatenate(vals),
                           (R * cur, 2 * R * prev)))
    g_rows, c_rows, counts = [], [], []
    for r, it in enumerate(items):
        g, c = np.nonzero(it.hist)
        g_rows.append(g + r * G)
        c_rows.append(c + r * sizes[-1])
        counts.append(it.hist[g, c])
    pool = _csr(np.concatenate(g_rows), np.concatenate(c_rows), np.concatenate(counts), (R * G, R * sizes[-1]))
    y = None
    if all(it.y is not None for it in items):
        y = torch.as_tensor(np.stack([it.y for it in items]), dtype=torch.long)
    return ColourBatch(init=init, layers=layers, pool=pool, sizes=sizes, n_graphs=G, y=y)


class ReplicateMPNN(nn.Module):
    """``R`` independent :class:`~.mpnn.MPNN` networks with stacked weights, evaluated on WL colours.

    Build it from the networks themselves (:meth:`from_models`), so that each replicate starts from exactly
    the weights that :class:`~.mpnn.MPNN` draws under its seed; :meth:`to_models` gives them back.
    """

    def __init__(self, models: list[MPNN]) -> None:
        super().__init__()
        if not models:
            raise ValueError("need at least one model")
        L = len(models[0].root)
        if any(len(m.root) != L for m in models):
            raise ValueError("every replicate needs the same number of layers")

        def stack(get):
            return nn.Parameter(torch.stack([get(m).detach() for m in models]).clone())

        # one fused weight per layer, [W_root | W_rel] (in, 2H): own state and neighbour part side by side
        self.weight = nn.ParameterList(
            [stack(lambda m, l=l: torch.cat([m.root[l].weight.T, m.rel[l].weight.T], 1)) for l in range(L)])
        self.bias = nn.ParameterList([stack(lambda m, l=l: m.rel[l].bias[None]) for l in range(L)])
        self.w1, self.b1 = stack(lambda m: m.head[0].weight.T), stack(lambda m: m.head[0].bias[None])
        self.gamma, self.beta = stack(lambda m: m.head[1].weight[None]), stack(lambda m: m.head[1].bias[None])
        self.w2, self.b2 = stack(lambda m: m.head[3].weight.T), stack(lambda m: m.head[3].bias[None])
        self.eps = [m.head[1].eps for m in models][0]
        self.register_buffer("normalize", torch.tensor([bool(m.normalize) for m in models]))

    @classmethod
    def from_models(cls, models: list[MPNN]) -> "ReplicateMPNN":
        return cls(models)

    def to_models(self) -> list[MPNN]:
        """The replicates as separate :class:`~.mpnn.MPNN` modules (with the current weights)."""
        R, L = self.w1.shape[0], len(self.weight)
        hidden = self.w1.shape[1]
        in_dim = self.weight[0].shape[1]
        out = []
        for r in range(R):
            m = MPNN(in_dim, hidden, L, self.w2.shape[2], normalize=bool(self.normalize[r]))
            with torch.no_grad():
                for l in range(L):
                    m.root[l].weight.copy_(self.weight[l][r, :, :hidden].T)
                    m.rel[l].weight.copy_(self.weight[l][r, :, hidden:].T)
                    m.rel[l].bias.copy_(self.bias[l][r, 0])
                m.head[0].weight.copy_(self.w1[r].T)
                m.head[0].bias.copy_(self.b1[r, 0])
                m.head[1].weight.copy_(self.gamma[r, 0])
                m.head[1].bias.copy_(self.beta[r, 0])
                m.head[3].weight.copy_(self.w2[r].T)
                m.head[3].bias.copy_(self.b2[r, 0])
            out.append(m)
        return out

    def forward(self, data: ColourBatch) -> torch.Tensor:
        """Outputs $\\phi(G)$ of every replicate on its own graphs: shape ``(R, G, K)``."""
        R = self.w1.shape[0]
        if data.init.shape[0] != R:
            raise ValueError(f"the batch holds {data.init.shape[0]} replicates, the model {R}")
        h = data.init                                                       # (R, C_0, F)
        for t, (W, b) in enumerate(zip(self.weight, self.bias)):
            # weights first, on the smaller previous round: (R, C_{t-1}, 2H), then one sparse product that
            # picks each colour's own (parent) row and sums its neighbours' rows
            hw = torch.bmm(h, W).reshape(R * data.sizes[t] * 2, -1)
            M, Mt = data.layers[t]
            h = torch.relu(_SparseMatmul.apply(M, Mt, hw).reshape(R, data.sizes[t + 1], -1) + b)
        P, Pt = data.pool
        pooled = _SparseMatmul.apply(P, Pt, h.reshape(R * data.sizes[-1], -1)).reshape(R, data.n_graphs, -1)
        a = torch.baddbmm(self.b1, pooled, self.w1)
        d = a - a.mean(1, keepdim=True)        # BatchNorm with batch statistics (written out: torch's var and
        var = (d * d).mean(1, keepdim=True)    # norm kernels are slow on these small strided reductions)
        a = d / torch.sqrt(var + self.eps) * self.gamma + self.beta
        z = torch.baddbmm(self.b2, torch.relu(a), self.w2)
        l1 = z.abs().sum(-1, keepdim=True).clamp_min(1e-12)     # F.normalize(z, p=1) where asked
        return torch.where(self.normalize[:, None, None], z / l1, z)


def _losses(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    R, G, K = z.shape
    each = F.multi_margin_loss(F.log_softmax(z.reshape(R * G, K), dim=1), y.reshape(-1), p=1, margin=1.0,
                               reduction="none")
    return each.reshape(R, G).mean(1)


def train_replicates(train: list[ColourGraphs], test: list[ColourGraphs], *, layers: int, seeds, normalize,
                     hidden: int = 16, epochs: int = 300, lr: float = 1e-3) -> list[TrainResult]:
    """Train ``R`` MPNNs at once, replicate ``r`` on ``train[r]`` from the initial weights of
    ``MPNN(...)`` under ``torch.manual_seed(seeds[r])``, with ``normalize[r]``; full-batch Adam on the margin
    loss, as :func:`~.mpnn.train_mpnn` does for one network. Returns one :class:`~.mpnn.TrainResult` each."""
    train, test, seeds, normalize = list(train), list(test), list(seeds), list(normalize)
    R = len(train)
    if not (len(test) == len(seeds) == len(normalize) == R) or R == 0:
        raise ValueError("train, test, seeds and normalize need one entry per replicate")
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    if any(c.layers != layers for c in train + test):
        raise ValueError(f"the colour graphs must be built for {layers} layers")
    if any(c.y is None for c in train + test):
        raise ValueError("train and test colour graphs need labels y")
    K = int(max(max(c.y.max() for c in train), max(c.y.max() for c in test))) + 1
    models = []
    for seed, norm in zip(seeds, normalize):
        torch.manual_seed(int(seed))
        models.append(MPNN(train[0].init.shape[1], hidden, layers, K, normalize=bool(norm)))
    model = ReplicateMPNN(models)
    tr, te = stack_colour_graphs(train), stack_colour_graphs(test)
    opt = torch.optim.Adam(model.parameters(), lr=lr, fused=True)   # the same update, in one kernel
    for _ in range(int(epochs)):
        opt.zero_grad()
        _losses(model(tr), tr.y).sum().backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        z_tr, z_te = model(tr), model(te)
        l_tr, l_te = _losses(z_tr, tr.y), _losses(z_te, te.y)
        acc_tr = (z_tr.argmax(2) == tr.y).float().mean(1)
        acc_te = (z_te.argmax(2) == te.y).float().mean(1)
    return [TrainResult(train_loss=float(l_tr[r]), test_loss=float(l_te[r]), train_acc=float(acc_tr[r]),
                        test_acc=float(acc_te[r]), phi_train=z_tr[r].numpy().astype(float)) for r in range(R)]
