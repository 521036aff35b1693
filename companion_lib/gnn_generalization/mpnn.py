r"""A sum-aggregation MPNN with the official head, the margin loss, training and the loss gap.

Each layer computes $h_v' = \mathrm{ReLU}\big(W_1 h_v + W_2\sum_{u\in N(v)} h_u + b\big)$ (the form of
PyTorch Geometric's ``GraphConv`` with sum aggregation; the tests check that the two agree), with
``index_add`` message passing, which is fast on a CPU. The graph embedding is the sum of the final
vertex states; the head is the official ``post_mp``: Linear, BatchNorm1d (batch statistics only),
ReLU, Linear to $K$ scores. With ``normalize=True`` the output is divided by its $\ell_1$ norm
(Table 3 of the paper). The network's output is $\phi(G)$ in the bound.

The training loss is the official ``margin`` loss, PyTorch's multi-class hinge loss with margin 1
applied to log-softmax scores, and the *loss gap* is test loss minus training loss after the last
epoch (``run/calculate_gap.py``).

An $\mathcal F$-MPNN appends rooted homomorphism counts $\mathrm{Hom}(F^r, G^v)$ to the vertex
features; here as $\log(1+\text{count})$, so that counts in the hundreds do not dominate the
constant feature.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .graphs import check_graphs, rooted_hom_counts

__all__ = ["GraphBatch", "make_batch", "MPNN", "margin_loss", "TrainResult", "train_mpnn"]


@dataclass
class GraphBatch:
    """Many graphs as one disconnected graph: vertex features, directed edges, graph index per vertex."""

    x: torch.Tensor           # (N, F)
    edge_index: torch.Tensor  # (2, E), both directions of every edge
    batch: torch.Tensor       # (N,), graph id of each vertex
    n_graphs: int
    y: torch.Tensor | None = None


def make_batch(graphs, y=None, patterns=()) -> GraphBatch:
    """Stack graphs into a :class:`GraphBatch`; features are 1 plus log1p rooted hom counts of ``patterns``."""
    graphs = check_graphs(graphs)
    if y is not None and len(y) != len(graphs):
        raise ValueError(f"y must hold one label per graph: got {len(y)} labels for {len(graphs)} graphs")
    xs, edges, batch = [], [], []
    offset = 0
    for g, G in enumerate(graphs):
        n = G.number_of_nodes()
        index = {v: i for i, v in enumerate(G.nodes)}
        feats = [np.ones(n)] + [np.log1p(rooted_hom_counts(G, p)) for p in patterns]
        xs.append(np.stack(feats, axis=1))
        e = np.array([(index[a], index[b]) for a, b in G.edges], dtype=np.int64).reshape(-1, 2)
        edges.append(np.concatenate([e, e[:, ::-1]]) + offset)
        batch.append(np.full(n, g))
        offset += n
    return GraphBatch(x=torch.tensor(np.concatenate(xs), dtype=torch.float32),
                      edge_index=torch.tensor(np.concatenate(edges).T.copy(), dtype=torch.long),
                      batch=torch.tensor(np.concatenate(batch), dtype=torch.long), n_graphs=len(graphs),
                      y=None if y is None else torch.as_tensor(np.asarray(y), dtype=torch.long))


class MPNN(nn.Module):
    """Sum-aggregation message passing, sum pooling and the official BatchNorm head."""

    def __init__(self, in_dim: int, hidden: int, layers: int, n_classes: int, normalize: bool = False) -> None:
        super().__init__()
        if layers < 1 or hidden < 1 or in_dim < 1 or n_classes < 2:
            raise ValueError("need in_dim >= 1, hidden >= 1, layers >= 1 and n_classes >= 2")
        dims = [in_dim] + [hidden] * layers
        self.root = nn.ModuleList(nn.Linear(a, b, bias=False) for a, b in zip(dims, dims[1:]))
        self.rel = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims, dims[1:]))
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.BatchNorm1d(hidden, track_running_stats=False),
                                  nn.ReLU(), nn.Linear(hidden, n_classes))
        self.normalize = normalize

    def vertex_states(self, data: GraphBatch, layers: int | None = None) -> torch.Tensor:
        """The vertex states after ``layers`` message-passing layers (all of them by default)."""
        h = data.x
        src, dst = data.edge_index
        for root, rel in list(zip(self.root, self.rel))[:layers]:
            agg = torch.zeros_like(h).index_add_(0, dst, h[src])
            h = torch.relu(root(h) + rel(agg))
        return h

    def forward(self, data: GraphBatch) -> torch.Tensor:
        h = self.vertex_states(data)
        pooled = torch.zeros(data.n_graphs, h.shape[1], dtype=h.dtype).index_add_(0, data.batch, h)
        z = self.head(pooled)
        return F.normalize(z, p=1, dim=1) if self.normalize else z


def margin_loss(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The official margin loss: multi-class hinge (p=1, margin 1) on log-softmax scores."""
    return F.multi_margin_loss(F.log_softmax(z, dim=1), y, p=1, margin=1.0)


@dataclass
class TrainResult:
    train_loss: float
    test_loss: float
    train_acc: float
    test_acc: float
    phi_train: np.ndarray      # network outputs on the training graphs, the phi of the bound

    @property
    def gap(self) -> float:
        """The loss gap: test (held-out) loss minus training loss."""
        return self.test_loss - self.train_loss


def train_mpnn(train: GraphBatch, test: GraphBatch, *, layers: int, hidden: int = 16, epochs: int = 300,
               lr: float = 1e-3, normalize: bool = False, seed: int = 0) -> TrainResult:
    """Full-batch Adam on the margin loss; returns losses, accuracies and phi on the training graphs."""
    if train.y is None or test.y is None:
        raise ValueError("train and test batches need labels y")
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    torch.manual_seed(seed)
    K = int(max(train.y.max(), test.y.max())) + 1
    model = MPNN(train.x.shape[1], hidden, layers, K, normalize=normalize)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(int(epochs)):
        opt.zero_grad()
        loss = margin_loss(model(train), train.y)
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        z_tr, z_te = model(train), model(test)
        return TrainResult(train_loss=float(margin_loss(z_tr, train.y)), test_loss=float(margin_loss(z_te, test.y)),
                           train_acc=float((z_tr.argmax(1) == train.y).float().mean()),
                           test_acc=float((z_te.argmax(1) == test.y).float().mean()),
                           phi_train=z_tr.numpy().astype(float))
