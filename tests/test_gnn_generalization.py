"""Unit tests for companion_lib.gnn_generalization (Li, Geerts, Kim and Wang, ICLR 2025)."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import ot
import pytest
import torch
from scipy.optimize import linear_sum_assignment
from scipy.spatial.distance import cdist

from companion_lib import gnn_generalization as gg


@pytest.fixture(scope="module")
def data():
    return gg.make_dataset(40, 0)


# -- data and homomorphism counts ------------------------------------------------------------------
def test_dataset_is_balanced_and_sized(data):
    assert len(data) == 40 and np.bincount(data.y).tolist() == [20, 20]
    assert all(12 <= G.number_of_nodes() <= 20 for G in data.graphs)
    train, test = data.split(0.5, np.random.default_rng(0))
    assert len(train) == len(test) == 20 and np.bincount(test.y).tolist() == [10, 10]


def test_dataset_rejects_bad_input():
    with pytest.raises(ValueError, match="no nodes"):
        gg.GraphDataset([nx.path_graph(3), nx.Graph()], [0, 1])
    with pytest.raises(ValueError, match="one label per graph"):
        gg.GraphDataset([nx.path_graph(3), nx.path_graph(4)], [0, 1, 1])
    with pytest.raises(ValueError, match="n_graphs"):
        gg.make_dataset(1, 0)


@pytest.mark.parametrize("pattern", ["P2", "P3", "C3", "C4", "C5", "K3", "K4"])
def test_rooted_hom_counts_match_brute_force(pattern):
    rng = np.random.default_rng(1)
    for trial in range(3):
        G = nx.gnp_random_graph(6, 0.6, seed=int(rng.integers(1000)))
        F, root = gg.pattern_graph(pattern)
        brute = [gg.brute_force_rooted_hom(F, root, G, v) for v in G.nodes]
        np.testing.assert_array_equal(gg.rooted_hom_counts(G, pattern), brute)


def test_hom_counts_closed_forms_on_k4():
    K4 = nx.complete_graph(4)
    assert gg.rooted_hom_counts(K4, "K4").tolist() == [6] * 4       # 3! * one 4-clique
    assert gg.rooted_hom_counts(K4, "C3").tolist() == [6] * 4       # closed 3-walks = 2 * 3 triangles
    assert gg.rooted_hom_counts(K4, "P2").tolist() == [9] * 4       # 3 * 3 walks of length 2
    with pytest.raises(ValueError, match="pattern"):
        gg.rooted_hom_counts(K4, "C9")
    with pytest.raises(ValueError, match="no nodes"):
        gg.rooted_hom_counts(nx.Graph(), "C3")


# -- colour refinement -----------------------------------------------------------------------------
def _partition(keys):
    groups = {}
    for i, k in enumerate(keys):
        groups.setdefault(k, []).append(i)
    return sorted(groups.values())


@pytest.mark.parametrize("iterations", [1, 2, 3])
def test_wl_histograms_partition_graphs_like_networkx(data, iterations):
    H = gg.wl_histograms(data.graphs, iterations)
    ours = _partition([tuple(row) for row in H])
    graphs = []
    for G in data.graphs:
        G = G.copy()
        nx.set_node_attributes(G, "a", "x")
        graphs.append(G)
    theirs = _partition([nx.weisfeiler_lehman_graph_hash(G, node_attr="x", iterations=iterations) for G in graphs])
    assert ours == theirs
    assert H.sum(axis=1).tolist() == [G.number_of_nodes() for G in data.graphs]


def test_wl_node_colours_match_networkx_subgraph_hashes():
    G = nx.gnp_random_graph(12, 0.3, seed=3)
    nx.set_node_attributes(G, "a", "x")
    colors = gg.wl_colors([G], 2)
    hashes = nx.weisfeiler_lehman_subgraph_hashes(G, node_attr="x", iterations=2)
    for t in (1, 2):
        theirs = _partition([hashes[v][t - 1] for v in G.nodes])
        assert _partition(colors[t][0].tolist()) == theirs


def test_wl_cannot_separate_regular_graphs_but_cycle_counts_can():
    two_triangles = nx.disjoint_union(nx.cycle_graph(3), nx.cycle_graph(3))
    hexagon = nx.cycle_graph(6)
    H = gg.wl_histograms([two_triangles, hexagon], 3)
    assert np.array_equal(H[0], H[1])
    F = gg.wl_histograms([two_triangles, hexagon], 1, patterns=("C3",))
    assert not np.array_equal(F[0], F[1])


def test_wl_all_iterations_and_bad_input(data):
    a = gg.wl_histograms(data.graphs, 2, all_iterations=True)
    b = gg.wl_histograms(data.graphs, 2)
    assert a.shape[1] > b.shape[1]
    assert _partition([tuple(r) for r in a]) == _partition([tuple(r) for r in b])
    with pytest.raises(ValueError, match="iterations"):
        gg.wl_histograms(data.graphs, -1)
    with pytest.raises(ValueError, match="at least one graph"):
        gg.wl_histograms([], 1)


# -- Wasserstein distances and the bound -----------------------------------------------------------
def test_w1_hand_case_and_appendix_example():
    assert gg.wasserstein1([[0.0], [1.0]], [[2.0], [3.0]]) == pytest.approx(2.0)
    cost = np.sqrt([[26.0, 28.0], [15.0, 23.0]])       # Appendix B.3: 5.0990, 5.2915, 3.8730, 4.7958
    assert gg.wasserstein1_from_cost(cost) == pytest.approx(4.5823, abs=1e-3)


def test_w1_matches_pot_and_assignment():
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(7, 3)), rng.normal(size=(7, 3)) + 1
    C = cdist(X, Y)
    r, c = linear_sum_assignment(C)
    assert gg.wasserstein1(X, Y) == pytest.approx(C[r, c].mean())
    Z = rng.normal(size=(4, 3))
    assert gg.wasserstein1(X, Z) == pytest.approx(ot.emd2(np.full(7, 1 / 7), np.full(4, 0.25), cdist(X, Z)))


def test_w1_rejects_nan_and_shapes():
    with pytest.raises(ValueError, match="NaN"):
        gg.wasserstein1([[np.nan, 0.0]], [[0.0, 0.0]])
    with pytest.raises(ValueError, match="dimension"):
        gg.wasserstein1(np.zeros((2, 2)), np.zeros((2, 3)))


def test_k_variance_two_point_distribution():
    # two halves of size 1 from {0, 1, 1, 0} on the line: W1 is |x - x'|, 1 with probability 2/3.
    X = np.array([[0.0], [1.0], [1.0], [0.0]])
    v = gg.k_variance(X, 1, np.random.default_rng(0), n_repeats=3000)
    assert v == pytest.approx(2 / 3, abs=0.03)
    with pytest.raises(ValueError, match="k must be"):
        gg.k_variance(X, 0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="2k"):
        gg.k_variance(X, 3, np.random.default_rng(0))


def test_lipschitz_constant_and_cor_4_5():
    rng = np.random.default_rng(0)
    lam = rng.integers(0, 3, size=(30, 5)).astype(float)
    phi = rng.normal(size=(30, 2))
    lip = gg.lipschitz_constant(lam, phi)
    assert lip <= gg.diameter(phi) / gg.separation(lam) + 1e-12     # Prop. 4.3: Lip(f) <= B / S
    assert gg.separation(lam) >= 1.0                                # integer histograms: 1-separating
    assert gg.lipschitz_constant(lam, 3 * phi) == pytest.approx(3 * lip)
    with pytest.raises(ValueError, match="same embedding"):
        gg.lipschitz_constant(np.ones((3, 2)), phi[:3])


def _toy_embeddings():
    rng = np.random.default_rng(0)
    lam = rng.integers(0, 4, size=(40, 6)).astype(float)
    phi = rng.normal(size=(40, 2))
    y = np.repeat([0, 1], 20)
    return lam, phi, y


def test_kvariance_bound_terms_add_up():
    lam, phi, y = _toy_embeddings()
    t = gg.kvariance_bound(lam, phi, y, rng=np.random.default_rng(0))
    assert t.m == 20 and t.lip_rho == 1.0
    assert t.confidence == pytest.approx(math.sqrt(math.log(2 / 0.1) / 40))
    expect = np.mean([t.lip_f * (w + 2 * d * math.sqrt(math.log(4 / 0.1) / 10)) for w, d in zip(t.w1, t.delta_c)])
    assert t.bound == pytest.approx(expect + t.confidence)
    # the bound falls as 1/gamma in its first term
    t2 = gg.kvariance_bound(lam, phi, y, gamma=2.0, rng=np.random.default_rng(0))
    assert t2.bound - t2.confidence == pytest.approx((t.bound - t.confidence) / 2)


def test_kvariance_bound_official_variant():
    lam, phi, y = _toy_embeddings()
    t = gg.kvariance_bound(lam, phi, y, rng=np.random.default_rng(0), official_code=True)
    assert t.lip_rho == pytest.approx(math.sqrt(1) / 2)
    idx0 = np.flatnonzero(y == 0)
    assert t.delta_c[0] == pytest.approx(gg.diameter(phi[idx0]))
    paper = gg.kvariance_bound(lam, phi, y, rng=np.random.default_rng(0))
    assert t.bound < paper.bound


def test_kvariance_bound_rejects_bad_input():
    lam, phi, y = _toy_embeddings()
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="gamma"):
        gg.kvariance_bound(lam, phi, y, gamma=0.0, rng=rng)
    with pytest.raises(ValueError, match="gamma"):
        gg.kvariance_bound(lam, phi, y, gamma=-1.0, rng=rng)
    with pytest.raises(ValueError, match="one label per embedding"):
        gg.kvariance_bound(lam, phi, y[:-1], rng=rng)
    with pytest.raises(ValueError, match="NaN"):
        bad = phi.copy()
        bad[0, 0] = np.nan
        gg.kvariance_bound(lam, bad, y, rng=rng)
    with pytest.raises(ValueError, match="n \\(pairs"):
        gg.kvariance_bound(lam, phi, y, n=0, rng=rng)
    with pytest.raises(ValueError, match="delta"):
        gg.kvariance_bound(lam, phi, y, delta=1.5, rng=rng)


def test_concentration_separation_on_separated_clusters():
    rng = np.random.default_rng(0)
    lam = np.concatenate([rng.normal(0, 0.1, size=(20, 2)), rng.normal(5, 0.1, size=(20, 2))])
    y = np.repeat([0, 1], 20)
    out = gg.concentration_separation(lam, y, 10, rng)
    assert out["intra"] < 0.5 and out["inter"] > 6 and out["ratio"] < 0.1
    with pytest.raises(ValueError, match="half"):
        gg.concentration_separation(lam, y, 11, rng)


# -- the MPNN --------------------------------------------------------------------------------------
def test_batch_and_mpnn_shapes(data):
    b = gg.make_batch(data.graphs[:5], data.y[:5], patterns=("C3", "K3"))
    assert b.x.shape == (sum(G.number_of_nodes() for G in data.graphs[:5]), 3)
    assert b.edge_index.shape[1] == 2 * sum(G.number_of_edges() for G in data.graphs[:5])
    model = gg.MPNN(3, 8, 2, 2, normalize=True)
    z = model(b)
    assert z.shape == (5, 2)
    torch.testing.assert_close(z.abs().sum(1), torch.ones(5))
    with pytest.raises(ValueError, match="one label per graph"):
        gg.make_batch(data.graphs[:2], [0])


def test_mpnn_layer_matches_torch_geometric_graphconv(data):
    GraphConv = pytest.importorskip("torch_geometric.nn").GraphConv
    b = gg.make_batch(data.graphs[:3], patterns=("C4",))
    torch.manual_seed(0)
    model = gg.MPNN(2, 4, 1, 2)
    conv = GraphConv(2, 4, aggr="add")
    with torch.no_grad():
        conv.lin_rel.weight.copy_(model.rel[0].weight)
        conv.lin_rel.bias.copy_(model.rel[0].bias)
        conv.lin_root.weight.copy_(model.root[0].weight)
        src, dst = b.edge_index
        agg = torch.zeros_like(b.x).index_add_(0, dst, b.x[src])
        ours = torch.relu(model.root[0](b.x) + model.rel[0](agg))
        torch.testing.assert_close(ours, torch.relu(conv(b.x, b.edge_index)))


def test_margin_loss_is_the_official_hinge():
    z = torch.tensor([[2.0, 0.0], [0.0, 0.1]])
    y = torch.tensor([0, 0])
    ls = torch.log_softmax(z, 1)
    manual = torch.stack([torch.clamp(1 - ls[i, y[i]] + ls[i, 1 - y[i]], min=0) for i in range(2)]).mean() / 2
    torch.testing.assert_close(gg.margin_loss(z, y), manual)


def test_run_experiment_row():
    row = gg.run_experiment(0, 1, n_graphs=40, epochs=5)
    assert row["gap"] == pytest.approx(row["test_loss"] - row["train_loss"])
    assert row["lip_f"] <= row["B_over_S"] + 1e-9
    assert row["bound"] > row["bound_code"] > 0


def test_vc_bound_formula():
    lam = np.array([[0.0, 1.0], [0.0, 1.0], [1.0, 0.0], [2.0, 0.0]])
    assert gg.n_distinct(lam) == 3
    assert gg.vc_bound(lam, 0.1) == pytest.approx(math.sqrt((3 * (math.log(8 / 3) + 1) - math.log(0.025)) / 4))
    # the paper's ENZYMES value: 540 training graphs, all distinguished, gives about 1.30
    assert gg.vc_bound(np.arange(540.0)[:, None], 0.1) == pytest.approx(1.302, abs=0.005)
