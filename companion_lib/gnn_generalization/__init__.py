r"""Generalization and expressivity of graph neural networks (Li, Geerts, Kim and Wang, ICLR 2025).

The paper bounds the generalization gap of a graph classifier $\psi\circ\phi$ by the *k-variance*
(intra-class concentration) of the training graphs in the space of a more expressive, *bounding*
encoder $\lambda$ (a 1-WL or $\mathcal F$-WL colour histogram), times $\mathrm{Lip}(f)$ of the map
$\phi = f\circ\lambda$, over the margin $\gamma$ (Theorem 5.1, its sample version Theorem D.2 and
Algorithm 1). This package computes each piece:

``graphs``
    the data (two-community graphs against random graphs of the same density), rooted homomorphism
    counts of paths, cycles and cliques, and brute-force counts for checking them.
``wl``
    1-WL and $\mathcal F$-WL colour refinement on a shared palette and the colour histograms
    $\lambda(G)$.
``bound``
    the Wasserstein-1 distance (POT), the k-variance, $\mathrm{Lip}(f)$, the k-variance margin bound of
    Algorithm 1 (and the official code's variant), and the concentration/separation quantities of
    Section 6.
``mpnn``
    a sum-aggregation MPNN with the official head, the margin loss, training and the loss gap.
``colour_mpnn``
    the same MPNN evaluated once per WL colour instead of once per vertex ($\phi = f\circ\lambda$ of
    Lemma 4.2, computed), for many independently seeded networks at once.
``experiment``
    the runs of the reproduction page: Tables 2-3, Figure 1 and the Section 6 case study.
"""

from .bound import (
    BoundTerms,
    concentration_separation,
    diameter,
    k_variance,
    kvariance_bound,
    lipschitz_constant,
    n_distinct,
    separation,
    vc_bound,
    wasserstein1,
    wasserstein1_from_cost,
)
from .graphs import (
    PATTERNS,
    GraphDataset,
    brute_force_rooted_hom,
    make_dataset,
    pattern_graph,
    rooted_hom_counts,
)
from .colour_mpnn import ColourGraphs, ReplicateMPNN, colour_graphs, stack_colour_graphs, train_replicates
from .experiment import SECTION6_ENCODERS, run_experiment, run_experiments, section6
from .mpnn import MPNN, TrainResult, GraphBatch, make_batch, margin_loss, train_mpnn
from .wl import wl_colors, wl_histograms

__all__ = [
    "PATTERNS", "SECTION6_ENCODERS", "BoundTerms", "ColourGraphs", "ReplicateMPNN", "colour_graphs",
    "stack_colour_graphs", "train_replicates", "run_experiments", "section6", "GraphBatch", "GraphDataset", "MPNN", "TrainResult",
    "brute_force_rooted_hom", "concentration_separation", "diameter", "k_variance", "kvariance_bound",
    "lipschitz_constant", "make_batch", "n_distinct", "vc_bound", "make_dataset", "margin_loss", "pattern_graph",
    "rooted_hom_counts", "run_experiment", "separation", "train_mpnn", "wasserstein1",
    "wasserstein1_from_cost", "wl_colors", "wl_histograms",
]
