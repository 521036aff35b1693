r"""Graph data made in code, and rooted homomorphism counts.

The book's stand-in for the paper's TU data sets is a binary task that 1-WL finds hard: class 0
graphs are two-community stochastic block models, class 1 graphs are Erdős–Rényi graphs with the
same expected number of edges. Their degree statistics are nearly the same, so an MPNN (as
expressive as 1-WL) sees little difference, while cycle and clique counts do.

Rooted homomorphism counts $\mathrm{Hom}(F^r, G^v)$ (Appendix B.2 of the paper) are the features an
$\mathcal F$-MPNN appends to the vertex features. For the patterns used here they have closed forms:

* rooted cycle $C_k$: closed walks of length $k$ at $v$, $\mathrm{Hom}(C_k^r, G^v) = (A^k)_{vv}$;
* rooted clique $K_k$: homomorphisms from a clique into a simple graph are injective, so
  $\mathrm{Hom}(K_k^r, G^v) = (k-1)!\,\#\{k\text{-cliques} \ni v\}$;
* path $P_k$ with $k$ edges rooted at an end: walks of length $k$ from $v$, $(A^k\mathbf 1)_v$.

:func:`brute_force_rooted_hom` enumerates all maps and is the unit tests' reference.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import networkx as nx
import numpy as np

__all__ = ["PATTERNS", "GraphDataset", "make_dataset", "pattern_graph", "rooted_hom_counts",
           "brute_force_rooted_hom", "check_graphs"]

#: The paper's pattern zoo (Figure 1): paths P2-P5, cycles C3-C6, cliques K3-K6.
PATTERNS = tuple([f"P{k}" for k in range(2, 6)] + [f"C{k}" for k in range(3, 7)] + [f"K{k}" for k in range(3, 7)])


def _parse_pattern(name: str) -> tuple[str, int]:
    if not isinstance(name, str) or name not in PATTERNS:
        raise ValueError(f"pattern must be one of {PATTERNS}, got {name!r}")
    return name[0], int(name[1:])


def check_graphs(graphs, name: str = "graphs") -> list[nx.Graph]:
    """Validate a non-empty sequence of simple undirected networkx graphs, each with at least one node."""
    graphs = list(graphs) if not isinstance(graphs, nx.Graph) else [graphs]
    if not graphs:
        raise ValueError(f"{name} must contain at least one graph")
    for i, G in enumerate(graphs):
        if not isinstance(G, nx.Graph) or G.is_directed() or G.is_multigraph():
            raise TypeError(f"{name}[{i}] must be a simple undirected networkx.Graph, got {type(G).__name__}")
        if G.number_of_nodes() == 0:
            raise ValueError(f"{name}[{i}] has no nodes: every graph needs at least one node")
    return graphs


def pattern_graph(name: str) -> tuple[nx.Graph, int]:
    """The pattern ``name`` ('P3', 'C4', 'K4', ...) as a networkx graph and its root vertex (0)."""
    kind, k = _parse_pattern(name)
    if kind == "P":
        return nx.path_graph(k + 1), 0        # k edges, rooted at an end
    if kind == "C":
        return nx.cycle_graph(k), 0
    return nx.complete_graph(k), 0


def rooted_hom_counts(G: nx.Graph, pattern: str) -> np.ndarray:
    r"""$\mathrm{Hom}(F^r, G^v)$ for every vertex $v$ of ``G`` (in ``G.nodes`` order), by closed form."""
    G = check_graphs([G], "G")[0]
    kind, k = _parse_pattern(pattern)
    index = {v: i for i, v in enumerate(G.nodes)}
    A = np.zeros((len(index), len(index)), dtype=np.int64)    # the adjacency matrix, built directly (networkx's
    for u, v in G.edges:                                       # to_numpy_array costs more than the counts)
        A[index[u], index[v]] = A[index[v], index[u]] = 1
    if kind == "C":
        return np.diag(np.linalg.matrix_power(A, k)).astype(np.int64)
    if kind == "P":
        return np.linalg.matrix_power(A, k).sum(axis=1).astype(np.int64)
    counts = np.zeros(G.number_of_nodes(), dtype=np.int64)
    for clique in nx.enumerate_all_cliques(G):
        if len(clique) > k:
            break
        if len(clique) == k:
            for v in clique:
                counts[index[v]] += 1
    return counts * math.factorial(k - 1)


def brute_force_rooted_hom(F: nx.Graph, root, G: nx.Graph, v) -> int:
    """Count maps h: V(F) -> V(G) with h(root) = v and every edge of F sent to an edge of G."""
    others = [u for u in F.nodes if u != root]
    targets = list(G.nodes)
    count = 0
    for image in itertools.product(targets, repeat=len(others)):
        h = dict(zip(others, image))
        h[root] = v
        if all(G.has_edge(h[a], h[b]) for a, b in F.edges):
            count += 1
    return count


@dataclass
class GraphDataset:
    """Graphs with integer class labels ``y`` (one per graph)."""

    graphs: list
    y: np.ndarray

    def __post_init__(self) -> None:
        self.graphs = check_graphs(self.graphs)
        self.y = np.asarray(self.y)
        if self.y.ndim != 1 or len(self.y) != len(self.graphs):
            raise ValueError(f"y must hold one label per graph: got {self.y.shape} labels for "
                             f"{len(self.graphs)} graphs")

    def __len__(self) -> int:
        return len(self.graphs)

    def subset(self, index) -> "GraphDataset":
        index = np.asarray(index, dtype=int)
        return GraphDataset([self.graphs[i] for i in index], self.y[index])

    def split(self, test_fraction: float, rng: np.random.Generator) -> tuple["GraphDataset", "GraphDataset"]:
        """A stratified random split into (train, test); ``test_fraction`` in (0, 1)."""
        if not 0 < test_fraction < 1:
            raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
        test = []
        for c in np.unique(self.y):
            idx = rng.permutation(np.flatnonzero(self.y == c))
            test.extend(idx[: int(round(test_fraction * len(idx)))])
        test = np.sort(np.asarray(test, dtype=int))
        train = np.setdiff1d(np.arange(len(self)), test)
        return self.subset(train), self.subset(test)


def make_dataset(n_graphs: int, seed: int, *, n_min: int = 12, n_max: int = 20, p_in: float = 0.5,
                 p_out: float = 0.05) -> GraphDataset:
    """Balanced two-class data: two-community SBM graphs (class 0) vs Erdős–Rényi graphs (class 1).

    Each graph has ``n_min``..``n_max`` nodes (uniform). The ER edge probability is chosen so that
    both classes have the same expected number of edges; node features are left to the model
    (constant 1 for an MPNN, rooted homomorphism counts for an F-MPNN).
    """
    if not isinstance(n_graphs, (int, np.integer)) or n_graphs < 2:
        raise ValueError(f"n_graphs must be an integer >= 2, got {n_graphs!r}")
    if not 1 <= n_min <= n_max:
        raise ValueError(f"need 1 <= n_min <= n_max, got n_min={n_min}, n_max={n_max}")
    if not (0 <= p_out <= 1 and 0 <= p_in <= 1):
        raise ValueError("p_in and p_out must be probabilities")
    rng = np.random.default_rng(seed)
    graphs, y = [], []
    for i in range(int(n_graphs)):
        n = int(rng.integers(n_min, n_max + 1))
        label = i % 2
        a = n // 2
        b = n - a
        if label == 0:
            G = nx.stochastic_block_model([a, b], [[p_in, p_out], [p_out, p_in]],
                                          seed=int(rng.integers(2**31)))
            G = nx.Graph(G)
        else:
            expected = p_in * (a * (a - 1) / 2 + b * (b - 1) / 2) + p_out * a * b
            G = nx.gnp_random_graph(n, expected / (n * (n - 1) / 2), seed=int(rng.integers(2**31)))
        G.graph.clear()
        graphs.append(nx.convert_node_labels_to_integers(G))
        y.append(label)
    return GraphDataset(graphs, np.asarray(y, dtype=np.int64))
