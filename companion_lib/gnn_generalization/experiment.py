r"""The runs of the reproduction page: Tables 2-3 (gap and bound against depth, with and without
normalisation), the pattern comparison of Figure 1, and the Section 6 case study, one replicate per seed.

:func:`run_experiment` is one run, written plainly (one network trained by :func:`~.mpnn.train_mpnn`);
:func:`run_experiments` computes the same rows for many seeds, depths and normalisations with the networks
of each depth trained together on WL colours (:func:`~.colour_mpnn.train_replicates`), which is what the
page runs. A seed fixes the data set (:func:`~.graphs.make_dataset`), the train/test split, the network's
initial weights and the bound's random halves.
"""

from __future__ import annotations

import numpy as np

from .bound import concentration_separation, diameter, kvariance_bound, n_distinct, separation, vc_bound
from .colour_mpnn import colour_graphs, train_replicates
from .graphs import make_dataset
from .mpnn import TrainResult, make_batch, train_mpnn
from .wl import wl_histograms

__all__ = ["run_experiment", "run_experiments", "section6", "SECTION6_ENCODERS"]

_DATASETS: dict = {}


def _dataset(n_graphs: int, seed: int):
    """:func:`~.graphs.make_dataset`, drawn once per process for each (size, seed): the page's runs, the
    Section 6 case study and the pattern runs all use the same data sets (nothing here modifies them)."""
    key = (int(n_graphs), int(seed))
    if key not in _DATASETS:
        _DATASETS[key] = make_dataset(n_graphs, seed)
    return _DATASETS[key]


def _row(seed: int, layers: int, normalize: bool, patterns, res: TrainResult, lam: np.ndarray, y: np.ndarray,
         gamma: float, delta: float) -> dict:
    paper = kvariance_bound(lam, res.phi_train, y, gamma=gamma, delta=delta, rng=np.random.default_rng([seed, 2]))
    code = kvariance_bound(lam, res.phi_train, y, gamma=gamma, delta=delta, rng=np.random.default_rng([seed, 2]),
                           official_code=True)
    return {"seed": seed, "layers": layers, "normalize": normalize, "patterns": "+".join(patterns) or "none",
            "gap": res.gap, "train_loss": res.train_loss, "test_loss": res.test_loss,
            "train_acc": res.train_acc, "test_acc": res.test_acc,
            "bound": paper.bound, "bound_code": code.bound, "lip_f": paper.lip_f, "w1": paper.mean_w1,
            "n_colours": lam.shape[1], "n_distinct": n_distinct(lam), "vc_bound": vc_bound(lam, delta),
            "B_over_S": diameter(res.phi_train) / separation(lam)}


def run_experiment(seed: int, layers: int, *, normalize: bool = False, patterns=(), n_graphs: int = 300,
                   epochs: int = 300, hidden: int = 16, lr: float = 1e-3, gamma: float = 1.0,
                   delta: float = 0.1) -> dict:
    r"""One run of the Table 2/3 experiment: data from ``seed``, an MPNN of ``layers`` layers, the bound.

    The bounding encoder is the WL (or F-WL with ``patterns``) histogram with as many iterations as
    the network has layers, on the training graphs. Returns one row: gap, losses, accuracies, both
    variants of the bound (the paper's formula and the official code's), $\mathrm{Lip}(f)$, the mean
    intra-class $W_1$, the VC bound, and $B/S$ of Prop. 4.3.
    """
    data = _dataset(n_graphs, seed)
    train, test = data.split(0.5, np.random.default_rng([seed, 1]))
    res = train_mpnn(make_batch(train.graphs, train.y, patterns), make_batch(test.graphs, test.y, patterns),
                     layers=layers, hidden=hidden, epochs=epochs, lr=lr, normalize=normalize, seed=seed)
    lam = wl_histograms(train.graphs, layers, patterns)
    return _row(seed, layers, normalize, patterns, res, lam, train.y, gamma, delta)


def run_experiments(seeds, layers, *, normalize=(False, True), patterns=(), n_graphs: int = 300,
                    epochs: int = 300, hidden: int = 16, lr: float = 1e-3, gamma: float = 1.0,
                    delta: float = 0.1) -> list[dict]:
    """The rows of :func:`run_experiment` for every seed, depth in ``layers`` and value in ``normalize``
    (seed-major order), the networks of one depth trained together on WL colours."""
    seeds, layers, normalize = [int(s) for s in seeds], sorted(int(L) for L in layers), list(normalize)
    if not seeds or not layers or not normalize:
        raise ValueError("seeds, layers and normalize must each hold at least one value")
    patterns = tuple(patterns)
    colours = {}
    for seed in seeds:
        data = _dataset(n_graphs, seed)
        train, test = data.split(0.5, np.random.default_rng([seed, 1]))
        colours[seed] = (colour_graphs(train.graphs, layers[-1], patterns, train.y),
                         colour_graphs(test.graphs, layers[-1], patterns, test.y))
    rows = {}
    for L in layers:
        jobs = [(seed, norm) for seed in seeds for norm in normalize]
        results = train_replicates([colours[s][0].truncate(L) for s, _ in jobs],
                                   [colours[s][1].truncate(L) for s, _ in jobs], layers=L,
                                   seeds=[s for s, _ in jobs], normalize=[n for _, n in jobs], hidden=hidden,
                                   epochs=epochs, lr=lr)
        for (seed, norm), res in zip(jobs, results):
            train_c = colours[seed][0]
            rows[seed, L, norm] = _row(seed, L, norm, patterns, res, train_c.hists[L], train_c.y, gamma, delta)
    return [rows[s, L, n] for s in seeds for L in layers for n in normalize]


#: The bounding encoders of Section 6: 1-WL, and F-WL with rooted 4-cycle or 4-clique counts.
SECTION6_ENCODERS = {"1-WL": (), "C4-WL": ("C4",), "K4-WL": ("K4",)}


def section6(seed: int, *, n_graphs: int = 300, half: int = 75, n_repeats: int = 5) -> list[dict]:
    r"""Section 6's quantities on the data set of ``seed`` for each encoder of :data:`SECTION6_ENCODERS` (one
    WL iteration): intra- and inter-class $W_1$ and their ratio (:func:`~.bound.concentration_separation`),
    the number of colours and of vertices, and ``intra_ceiling``, the intra-class $W_1$ that the same halves
    would have if no two graphs shared a colour. Since $\|\lambda(G)-\lambda(H)\|^2 = \|\lambda(G)\|^2 +
    \|\lambda(H)\|^2 - 2\lambda(G)\cdot\lambda(H)$ and histograms are non-negative, this is an upper bound of
    the intra-class $W_1$, set by each graph's own histogram alone: an encoder whose intra-class $W_1$ sits at
    its ceiling measures no concentration at all, whatever the classes."""
    from .bound import _halves, wasserstein1_from_cost

    data = _dataset(n_graphs, seed)
    n_vertices = sum(G.number_of_nodes() for G in data.graphs)
    out = []
    for name, patterns in SECTION6_ENCODERS.items():
        rng = np.random.default_rng([seed, 6])          # the same halves for every encoder
        lam = wl_histograms(data.graphs, 1, patterns)
        cs = concentration_separation(lam, data.y, half, rng, n_repeats)
        sq = (lam ** 2).sum(axis=1)
        rng = np.random.default_rng([seed, 6])          # replay the draws of concentration_separation
        ceiling = []
        for _ in range(int(n_repeats)):
            for c in np.unique(data.y):
                a, b = _halves(np.flatnonzero(data.y == c), int(half), rng, overlap=False)
                ceiling.append(wasserstein1_from_cost(np.sqrt(sq[a][:, None] + sq[b][None, :])))
        out.append({"seed": seed, "encoder": name, "colours": lam.shape[1], "vertices": n_vertices,
                    **cs, "intra_ceiling": float(np.mean(ceiling))})
    return out
