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
        torch.testing.assert_close(model.vertex_states(b), torch.relu(conv(b.x, b.edge_index)))


def test_train_mpnn_lowers_the_training_loss(data):
    b = gg.make_batch(data.graphs, data.y)
    torch.manual_seed(0)
    with torch.no_grad():
        start = float(gg.margin_loss(gg.MPNN(1, 16, 2, 2)(b), b.y))
    end = gg.train_mpnn(b, b, layers=2, epochs=60, seed=0).train_loss
    assert end < start - 0.02
    with pytest.raises(ValueError, match="epochs"):
        gg.train_mpnn(b, b, layers=2, epochs=0)


def test_margin_loss_is_the_official_hinge():
    z = torch.tensor([[2.0, 0.0], [0.0, 0.1]])
    y = torch.tensor([0, 0])
    ls = torch.log_softmax(z, 1)
    manual = torch.stack([torch.clamp(1 - ls[i, y[i]] + ls[i, 1 - y[i]], min=0) for i in range(2)]).mean() / 2
    torch.testing.assert_close(gg.margin_loss(z, y), manual)


def test_run_experiment_row():
    row = gg.run_experiment(0, 1, n_graphs=40, epochs=5)
    assert row["gap"] == pytest.approx(row["test_loss"] - row["train_loss"])
    assert row["lip_f"] <= row["B_over_S"] + 1e-9                  # Prop. 4.3 on the sample
    assert row["bound"] > row["bound_code"] > 0
    assert row["vc_bound"] == pytest.approx(gg.vc_bound(gg.wl_histograms(
        gg.make_dataset(40, 0).split(0.5, np.random.default_rng([0, 1]))[0].graphs, 1)))


def test_vc_bound_formula():
    lam = np.array([[0.0, 1.0], [0.0, 1.0], [1.0, 0.0], [2.0, 0.0]])
    assert gg.n_distinct(lam) == 3
    assert gg.vc_bound(lam, 0.1) == pytest.approx(math.sqrt((3 * (math.log(8 / 3) + 1) - math.log(0.025)) / 4))
    # the paper's ENZYMES value: 540 training graphs, all distinguished, gives about 1.30
    assert gg.vc_bound(np.arange(540.0)[:, None], 0.1) == pytest.approx(1.302, abs=0.005)


def test_vc_bound_is_constant_once_every_graph_is_told_apart(data):
    # WL refinement is monotone and D <= |S|: once one round tells every training graph apart, the VC
    # bound of Appendix E is the same at every depth (it cannot "go flat": it is flat by construction)
    H1 = gg.wl_histograms(data.graphs, 1)
    if gg.n_distinct(H1) == len(data):
        values = {gg.vc_bound(gg.wl_histograms(data.graphs, L)) for L in (1, 2, 3)}
        assert len(values) == 1
    counts = [gg.n_distinct(gg.wl_histograms(data.graphs, L)) for L in range(4)]
    assert counts == sorted(counts) and counts[-1] <= len(data)
    assert gg.vc_bound(np.arange(10.0)[:, None]) > gg.vc_bound(np.repeat(np.arange(5.0), 2)[:, None])


def test_n_distinct_agrees_with_numpy_unique():
    rng = np.random.default_rng(0)
    lam = rng.integers(0, 2, size=(50, 4)).astype(float)
    assert gg.n_distinct(lam) == len(np.unique(lam, axis=0))
    assert gg.n_distinct(np.array([[0.0, 1.0], [-0.0, 1.0]])) == 1


# -- the MPNN on WL colours, many replicates at once ---------------------------------------------------
@pytest.mark.parametrize("layers, patterns", [(1, ()), (3, ()), (2, ("C3", "K4"))])
def test_colour_graphs_histograms_are_the_wl_histograms(data, layers, patterns):
    cg = gg.colour_graphs(data.graphs, layers, patterns, data.y)
    np.testing.assert_array_equal(cg.hist, gg.wl_histograms(data.graphs, layers, patterns))
    assert cg.n_colours[0] == cg.init.shape[0] and cg.layers == layers
    if layers > 1:
        short = cg.truncate(1)
        np.testing.assert_array_equal(short.hist, gg.wl_histograms(data.graphs, 1, patterns))
        assert short.layers == 1
        with pytest.raises(ValueError, match="layers"):
            cg.truncate(layers + 1)


@pytest.mark.parametrize("layers, patterns", [(1, ()), (3, ()), (2, ("C3", "K4"))])
def test_replicate_mpnn_computes_each_mpnn(data, layers, patterns):
    models = []
    for seed, norm in [(0, False), (1, True), (2, False)]:
        torch.manual_seed(seed)
        models.append(gg.MPNN(1 + len(patterns), 8, layers, 2, normalize=norm))
    parts = [data.graphs[:12], data.graphs[12:24], data.graphs[24:36]]
    rep = gg.ReplicateMPNN(models)
    with torch.no_grad():
        z = rep(gg.stack_colour_graphs([gg.colour_graphs(p, layers, patterns) for p in parts]))
        for r, (m, p) in enumerate(zip(models, parts)):
            torch.testing.assert_close(z[r], m(gg.make_batch(p, patterns=patterns)), atol=1e-5, rtol=1e-5)
    for m, back in zip(models, rep.to_models()):
        for a, b in zip(m.state_dict().values(), back.state_dict().values()):
            torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_replicate_gradients_are_each_networks_gradients(data):
    from companion_lib.gnn_generalization.colour_mpnn import _losses

    parts = [data.graphs[:20], data.graphs[20:]]
    labels = [data.y[:20], data.y[20:]]
    models = []
    for seed in (3, 4):
        torch.manual_seed(seed)
        models.append(gg.MPNN(2, 8, 2, 2, normalize=seed == 4))
    rep = gg.ReplicateMPNN(models)
    batch = gg.stack_colour_graphs([gg.colour_graphs(p, 2, ("C4",), y) for p, y in zip(parts, labels)])
    _losses(rep(batch), batch.y).sum().backward()
    for r, (m, p, y) in enumerate(zip(models, parts, labels)):
        b = gg.make_batch(p, y, ("C4",))
        gg.margin_loss(m(b), b.y).backward()
        ours, theirs = rep.weight[1].grad[r], torch.cat([m.root[1].weight.grad.T, m.rel[1].weight.grad.T], 1)
        scale = float(theirs.abs().max())                 # float32 rounding, relative to the largest entry
        torch.testing.assert_close(ours, theirs, atol=1e-4 * scale, rtol=0)
        torch.testing.assert_close(rep.w2.grad[r], m.head[3].weight.grad.T, atol=1e-4 * scale, rtol=0)


def test_train_replicates_trains_each_replicate(data):
    train, test = data.split(0.5, np.random.default_rng(0))
    tr, te = gg.colour_graphs(train.graphs, 2, y=train.y), gg.colour_graphs(test.graphs, 2, y=test.y)
    res = gg.train_replicates([tr, tr], [te, te], layers=2, seeds=[0, 0], normalize=[False, True], epochs=1)
    for r, norm in zip(res, (False, True)):      # one epoch: the same as training each network alone
        ref = gg.train_mpnn(gg.make_batch(train.graphs, train.y), gg.make_batch(test.graphs, test.y), layers=2,
                            epochs=1, normalize=norm, seed=0)
        assert r.train_loss == pytest.approx(ref.train_loss, abs=1e-4)
        np.testing.assert_allclose(r.phi_train, ref.phi_train, atol=1e-3)
    long = gg.train_replicates([tr], [te], layers=2, seeds=[0], normalize=[False], epochs=80)[0]
    assert long.train_loss < res[0].train_loss - 0.02
    with pytest.raises(ValueError, match="one entry per replicate"):
        gg.train_replicates([tr], [te, te], layers=2, seeds=[0], normalize=[False])
    with pytest.raises(ValueError, match="layers"):
        gg.train_replicates([tr], [te], layers=3, seeds=[0], normalize=[False])
    with pytest.raises(ValueError, match="labels"):
        gg.train_replicates([gg.colour_graphs(train.graphs, 2)], [te], layers=2, seeds=[0], normalize=[False])


def test_stack_colour_graphs_rejects_mismatched_replicates(data):
    a = gg.colour_graphs(data.graphs[:10], 2)
    with pytest.raises(ValueError, match="same number of graphs"):
        gg.stack_colour_graphs([a, gg.colour_graphs(data.graphs[:11], 2)])
    with pytest.raises(ValueError, match="at least one"):
        gg.stack_colour_graphs([])


def test_run_experiments_rows_match_the_single_run_layout():
    rows = gg.run_experiments([0, 1], [1, 2], n_graphs=40, epochs=3)
    assert [(r["seed"], r["layers"], r["normalize"]) for r in rows] == [
        (s, L, n) for s in (0, 1) for L in (1, 2) for n in (False, True)]
    single = gg.run_experiment(1, 2, normalize=True, n_graphs=40, epochs=3)
    assert set(rows[0]) == set(single)
    row = rows[-1]
    for key in ("n_colours", "n_distinct", "vc_bound"):              # the bounding encoder is the same
        assert row[key] == single[key]
    assert row["train_loss"] == pytest.approx(single["train_loss"], abs=1e-3)
    with pytest.raises(ValueError, match="at least one"):
        gg.run_experiments([], [1])


def test_section6_quantities_and_the_ceiling():
    rows = {r["encoder"]: r for r in gg.section6(0, n_graphs=60, half=10, n_repeats=2)}
    assert set(rows) == set(gg.SECTION6_ENCODERS)
    for r in rows.values():
        assert r["intra"] <= r["intra_ceiling"] + 1e-9                # no shared colour is the worst case
        assert r["ratio"] == pytest.approx(r["intra"] / r["inter"])
    assert rows["C4-WL"]["colours"] > rows["K4-WL"]["colours"] > rows["1-WL"]["colours"]
