r"""1-WL and $\mathcal F$-WL colour refinement, and the colour histograms $\lambda(G)$.

Colour refinement (Section 4 of the paper) starts from initial vertex colours $\chi^0(v)$ (all equal
for 1-WL; the tuple of rooted homomorphism counts $\mathrm{Hom}(F^r, G^v)$, $F\in\mathcal F$, for
$\mathcal F$-WL) and repeats

$$\chi^{t+1}(v) = \mathrm{hash}\big(\chi^t(v),\ \{\!\{\chi^t(u) : u\in N(v)\}\!\}\big).$$

The *bounding encoder* of the paper is the histogram of the colours after $L$ iterations,
$\lambda(G)\in\mathbb N^{|\text{palette}|}$, with the same $L$ as the MPNN has layers (the printed
example of Appendix B.3 is such a histogram after one iteration). The palette is shared by all graphs
and colours are relabelled with small integers at every iteration, so signatures never nest (nested
colour strings would grow exponentially with $L$). Histograms are integer-valued, so $\lambda$ is
1-separating: two different histograms are at Euclidean distance at least 1.
"""

from __future__ import annotations

import numpy as np

from .graphs import check_graphs, rooted_hom_counts

__all__ = ["wl_colors", "wl_histograms", "initial_colors"]


def initial_colors(graphs, patterns=()) -> list[list[tuple]]:
    """Initial vertex labels: ``()`` for 1-WL, the tuple of rooted hom counts for F-WL."""
    graphs = check_graphs(graphs)
    if not patterns:
        return [[()] * G.number_of_nodes() for G in graphs]
    out = []
    for G in graphs:
        counts = np.stack([rooted_hom_counts(G, p) for p in patterns], axis=1)
        out.append([tuple(int(c) for c in row) for row in counts])
    return out


def wl_colors(graphs, iterations: int, patterns=()) -> list[list[np.ndarray]]:
    r"""Colours $\chi^t$ for $t = 0..L$: ``colors[t][g][i]`` is the colour id of node ``i`` of graph ``g``.

    Nodes are taken in ``G.nodes`` order. Ids are shared across graphs (one palette per iteration).
    """
    graphs = check_graphs(graphs)
    if isinstance(iterations, bool) or not isinstance(iterations, (int, np.integer)) or iterations < 0:
        raise ValueError(f"iterations must be a non-negative integer, got {iterations!r}")
    labels = initial_colors(graphs, patterns)
    palette: dict = {}
    current = [np.array([palette.setdefault(lab, len(palette)) for lab in labs], dtype=np.int64)
               for labs in labels]
    history = [current]
    neighbours = []
    for G in graphs:
        index = {v: i for i, v in enumerate(G.nodes)}
        neighbours.append([[index[u] for u in G.neighbors(v)] for v in G.nodes])
    for _ in range(int(iterations)):
        palette = {}
        nxt = []
        for col, nbrs in zip(current, neighbours):
            sig = [(int(col[i]), tuple(sorted(int(col[j]) for j in nb))) for i, nb in enumerate(nbrs)]
            nxt.append(np.array([palette.setdefault(s, len(palette)) for s in sig], dtype=np.int64))
        current = nxt
        history.append(current)
    return history


def wl_histograms(graphs, iterations: int, patterns=(), *, all_iterations: bool = False) -> np.ndarray:
    r"""The bounding encoder $\lambda(G)$: counts of each colour after ``iterations`` rounds.

    Returns an array of shape ``(n_graphs, n_colours)``. With ``all_iterations=True`` the histograms
    of rounds $0..L$ are concatenated (the WL subtree-kernel features); both give the same partition
    of the graphs, since the colour at round $t$ determines the colour at round $t-1$.
    """
    history = wl_colors(graphs, iterations, patterns)
    rounds = history if all_iterations else history[-1:]
    blocks = []
    for colors in rounds:
        n_col = 1 + max(int(c.max()) for c in colors)
        H = np.zeros((len(colors), n_col))
        for g, c in enumerate(colors):
            np.add.at(H[g], c, 1.0)
        blocks.append(H)
    return np.concatenate(blocks, axis=1)
