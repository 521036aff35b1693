"""Unit tests for companion_lib.infomorphic_neurons (Schneider, Neuhaus, Ehrlich et al., ICLR 2025)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from companion_lib import infomorphic_neurons as im
from companion_lib.infomorphic_neurons.network import _atoms, with_


def _gate(f):
    P = np.zeros((2, 2, 2))
    for a in range(2):
        for b in range(2):
            P[a, b, f(a, b)] += 0.25
    return P


def test_lattice_sizes_and_mobius():
    assert len(im.antichains(2)) == 4 and len(im.antichains(3)) == 18
    for n in (2, 3):
        M = im.mobius_matrix(n)
        nodes = im.antichains(n)
        Z = np.array([[float(im.precedes(a, b)) for a in nodes] for b in nodes])
        np.testing.assert_allclose(M @ Z, np.eye(len(nodes)), atol=1e-12)
    assert im.atom_labels(2) == ("{F}{C}", "{F}", "{C}", "{FC}")
    assert im.atom_labels(3)[0] == "{F}{C}{L}" and im.atom_labels(3)[-1] == "{FCL}"


@pytest.mark.parametrize("name,f,expected", [
    ("xor", lambda a, b: a ^ b, {"{F}": 0.585, "{C}": 0.585, "{F}{C}": -0.585, "{FC}": 0.415}),
    ("and", lambda a, b: a & b, {"{F}": 0.189, "{C}": 0.189, "{F}{C}": 0.123, "{FC}": 0.311}),
    ("copy", lambda a, b: a, {"{F}": 0.585, "{C}": -0.415, "{F}{C}": 0.415, "{FC}": 0.415}),
])
def test_textbook_gates(name, f, expected):
    atoms = im.pid_from_joint(_gate(f))
    for k, v in expected.items():
        assert atoms[k] == pytest.approx(v, abs=1e-3), (name, k)
    assert atoms["H_res"] == pytest.approx(0.0, abs=1e-12)


def test_rdn_is_pure_redundancy_and_atoms_sum_to_mi():
    P = np.zeros((2, 2, 2)); P[0, 0, 0] = P[1, 1, 1] = 0.5
    atoms = im.pid_from_joint(P)
    assert atoms["{F}{C}"] == pytest.approx(1.0) and abs(atoms["{FC}"]) < 1e-12
    rng = np.random.default_rng(0)
    Q = rng.dirichlet(np.ones(3 * 2 * 4 * 2)).reshape(3, 2, 4, 2)
    a = im.pid_from_joint(Q)
    pt = Q.sum((0, 1, 2)); ps = Q.sum(3); mi = np.sum(Q * np.log2(Q / (ps[..., None] * pt)))
    assert sum(v for k, v in a.items() if k != "H_res") == pytest.approx(mi, abs=1e-10)


@pytest.mark.parametrize("n_sources", [2, 3])
def test_matches_dit_pid_sx(n_sources):
    import dit
    from dit.pid import PID_SX
    rng = np.random.default_rng(n_sources)
    for _ in range(3):
        p = rng.dirichlet(np.ones(2 ** (n_sources + 1)))
        outcomes = [format(i, f"0{n_sources + 1}b") for i in range(2 ** (n_sources + 1))]
        d = dit.Distribution(outcomes, p)
        ref = PID_SX(d, [[i] for i in range(n_sources)], [n_sources])
        ours = im.pid_from_joint(p.reshape((2,) * (n_sources + 1)))
        names = im.SOURCE_NAMES[n_sources]
        for node, label in zip(im.antichains(n_sources), im.atom_labels(n_sources)):
            key = tuple(tuple(sorted(a)) for a in node)
            val = ref.get_pi(next(k for k in ref._lattice if
                                  sorted(tuple(sorted(x)) for x in k) == sorted(key)))
            assert abs(ours[label] - val) < 1e-8, (label, names)


def test_pid_rejects_bad_input():
    with pytest.raises(ValueError, match="sum to one"):
        im.pid_from_joint(np.full((2, 2, 2), 0.2))
    P = np.full((2, 2, 2), 0.125); P[0, 0, 0] = -0.125; P[1, 1, 1] = 0.375
    with pytest.raises(ValueError, match="non-negative"):
        im.pid_from_joint(P)
    with pytest.raises(ValueError, match="n_sources"):
        im.pid_from_joint(np.full((2, 2, 2, 2, 2), 1 / 32))
    with pytest.raises(ValueError, match="n_sources"):
        im.atom_labels(4)


def test_batched_pid_is_differentiable():
    logits = torch.randn(4, 3, 3, 3, 2, dtype=torch.float64, requires_grad=True)
    P = torch.softmax(logits.reshape(4, -1), -1).reshape(4, 3, 3, 3, 2)
    out = im.pid_from_joint(P, n_sources=3)
    assert out.shape == (4, 19)
    out[:, 1].sum().backward()
    assert torch.isfinite(logits.grad).all() and logits.grad.abs().sum() > 0


def test_soft_joint_sums_to_one_and_marginal_has_no_gradient():
    torch.manual_seed(0)
    F, C = torch.randn(64, 5), torch.randn(64, 5)
    w = torch.zeros(5, requires_grad=True)
    theta = torch.sigmoid(F * (1 + w))
    P = im.soft_joint([F, C], theta, 4)
    assert P.shape == (5, 4, 4, 2)
    np.testing.assert_allclose(P.sum((1, 2, 3)).detach().numpy(), 1.0, atol=1e-6)
    P.sum(-1).sum().backward()    # the source marginal does not depend on theta
    assert w.grad.abs().max() < 1e-6
    with pytest.raises(ValueError, match="n_bins"):
        im.soft_joint([F, C], theta, 0)
    with pytest.raises(ValueError, match="n_bins"):
        im.soft_joint([F, C], theta, [3])


def test_goal_vector_and_bad_goal():
    g = im.goal_vector({"{F}{C}": 1.0, "H_res": 0.5}, 2)
    assert g.tolist() == [1.0, 0.0, 0.0, 0.0, 0.5]
    with pytest.raises(ValueError, match="goal"):
        im.goal_vector({"{F}{X}": 1.0}, 3)
    with pytest.raises(TypeError, match="goal"):
        im.goal_vector([1.0], 2)


def test_local_learning_beats_chance_and_config_errors():
    data = im.load_digits_split(0)
    cfg = im.TrainConfig(n_hidden=10, epochs=8)
    r = im.run_experiment(cfg, 0, data)
    assert r["accuracy"] > 0.4 and r["atoms"].shape == (8, 19)
    assert len(r["atom_labels"]) == 19
    with pytest.raises(ValueError, match="hidden"):
        im.run_experiment(with_(cfg, hidden="deep"), 0, data)
    with pytest.raises(ValueError, match="goal"):
        im.run_experiment(with_(cfg, goal="nonsense"), 0, data)
    with pytest.raises(ValueError, match="n_hidden"):
        im.run_experiment(with_(cfg, n_hidden=0), 0, data)
    with pytest.raises(ValueError, match="bins"):
        im.run_experiment(with_(cfg, bins_hidden=0), 0, data)


def test_batched_models_are_independent():
    torch.manual_seed(0)
    cfg = im.TrainConfig(n_hidden=6)
    net = im.InfoNet(64, 10, cfg, n_models=3)
    x, y1 = torch.randn(32, 64), torch.eye(10)[torch.randint(0, 10, (32,))]
    srcs, theta, s = net.hidden_forward(x, y1)
    assert theta.shape == (32, 3, 6) and all(t.shape == (32, 3, 6) for t in srcs)
    (theta[:, 1].sum() + net.output_theta(s)[:, 1].sum()).backward()
    for p in (net.ff_w, net.ctx_w, net.lat_w, net.out_w):
        assert p.grad[[0, 2]].abs().max() == 0 and p.grad[1].abs().max() > 0
    with pytest.raises(ValueError, match="n_models"):
        im.InfoNet(64, 10, cfg, n_models=0)


def test_run_models_shapes_paired_init_and_errors():
    data = im.load_digits_split(0)
    cfg = im.TrainConfig(n_hidden=8, epochs=2)
    r = im.run_models(cfg, 0, goals=["trivariate heuristic", "unique F"], replicates=2, data=data)
    assert r["accuracy"].shape == (2, 2) and r["atoms"].shape == (2, 2, 2, 19)
    assert ((r["accuracy"] > 0) & (r["accuracy"] <= 1)).all()
    one = im.run_experiment(cfg, 0, data)
    assert isinstance(one["accuracy"], float) and one["atoms"].shape == (2, 19)
    rp = im.run_experiment(with_(cfg, hidden="random"), 0, data)
    assert rp["accuracy"] > 0.15 and rp["atom_labels"] == ()   # above chance (0.1)
    with pytest.raises(ValueError, match="replicates"):
        im.run_models(cfg, 0, replicates=0, data=data)
    with pytest.raises(ValueError, match="goals"):
        im.run_models(cfg, 0, goals=[], data=data)


def test_perturb_goal_and_paired_interval():
    opt = im.GOALS["trivariate optimised"]
    assert len(opt) == 19 and im.goal_vector(opt, 3).shape == (19,)
    assert "{F}{L}" not in im.perturb_goal(opt, "{F}{L}", "zero") and "{F}{L}" in opt
    assert im.perturb_goal(opt, "{F}", 0.1)["{F}"] == pytest.approx(opt["{F}"] + 0.1)
    assert im.perturb_goal({}, "H_res", 0.1) == {"H_res": 0.1}
    for atom, change in im.SENSITIVE_PERTURBATIONS:
        im.goal_vector(im.perturb_goal(opt, atom, change), 3)       # every perturbed atom exists
    with pytest.raises(ValueError, match="change"):
        im.perturb_goal(opt, "{F}", "double")
    m, lo, hi = im.paired_interval([0.1, 0.2, 0.3])
    assert m == pytest.approx(0.2) and lo < m < hi and hi - m == pytest.approx(m - lo)
    with pytest.raises(ValueError, match="two"):
        im.paired_interval([0.1])
    with pytest.raises(ValueError, match="level"):
        im.paired_interval([0.1, 0.2], level=1.5)


def test_isx_matches_the_node_by_node_formula():
    # the vectorised inclusion-exclusion against a direct evaluation of the definition, node by node
    import itertools
    rng = np.random.default_rng(5)
    P = rng.dirichlet(np.ones(3 * 2 * 2 * 2)).reshape(3, 2, 2, 2)
    P[0, 0, 0, 0] = 0; P /= P.sum()
    ours = im.isx_redundancies(P, 3).numpy()
    for node, val in zip(im.antichains(3), ours):
        total = 0.0
        for s in itertools.product(*(range(k) for k in P.shape[:3])):
            for t in range(2):
                if P[s + (t,)] == 0:
                    continue
                ev = np.zeros(P.shape[:3], dtype=bool)
                for a in node:
                    idx = np.ones(P.shape[:3], dtype=bool)
                    for i in a:
                        sl = [slice(None)] * 3; sl[i] = [j for j in range(P.shape[i]) if j != s[i]]
                        idx[tuple(sl)] = False
                    ev |= idx
                pu, pu_t, p_t = P[ev].sum(), P[..., t][ev].sum(), P[..., t].sum()
                total += P[s + (t,)] * np.log2(pu_t / (pu * p_t))
        assert abs(total - val) < 1e-9


def test_source_grad_off_is_exact_for_soft_joints():
    torch.manual_seed(1)
    F, C, L = torch.randn(128, 4), torch.randn(128, 4), torch.randn(128, 4)
    w = torch.tensor([0.7, -0.3, 1.1], requires_grad=True)
    grads = []
    for flag in (True, False):
        theta = torch.sigmoid(w[0] * F + w[1] * C + w[2] * L)
        atoms = im.pid_from_joint(im.soft_joint([F, C, L], theta, 3), n_sources=3, source_grad=flag)
        grads.append(torch.autograd.grad((atoms * torch.linspace(-1, 1, 19)).sum(), w)[0])
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-6)


def test_surrogate_bernoulli_samples_and_gradient():
    torch.manual_seed(0)
    a = torch.linspace(-3, 3, 7).repeat(4000, 1).requires_grad_(True)
    b = im.SurrogateBernoulli.apply(a)
    assert set(b.unique().tolist()) <= {0.0, 1.0}
    # forward: Bernoulli(sigmoid(a)) samples (frequencies within a few standard errors)
    np.testing.assert_allclose(b.mean(0).detach().numpy(), torch.sigmoid(a[0]).detach().numpy(), atol=0.03)
    # backward: the sigmoid surrogate, d b / d a := sigmoid(a) (1 - sigmoid(a))
    g = torch.randn_like(a)
    (grad,) = torch.autograd.grad((b * g).sum(), a)
    sig = torch.sigmoid(a.detach())
    torch.testing.assert_close(grad, g * sig * (1 - sig))


def test_backprop_gradient_reaches_hidden_weights_only_through_surrogate():
    torch.manual_seed(0)
    cfg = im.TrainConfig(n_hidden=6)
    net = im.InfoNet(64, 10, cfg, n_models=2)
    x, y1 = torch.randn(32, 64), torch.eye(10)[torch.randint(0, 10, (32,))]
    _, _, s = net.hidden_forward(x, y1, surrogate=True)
    assert set(s.unique().tolist()) <= {-1.0, 1.0}
    net.output_drive(s)[:, 0].sum().backward()
    # the output loss reaches the hidden (feedforward, context, lateral) weights of model 0 through the samples
    for p in (net.ff_w, net.ctx_w, net.lat_w):
        assert p.grad[0].abs().max() > 0 and p.grad[1].abs().max() == 0
    net.zero_grad()
    _, _, s = net.hidden_forward(x, y1)          # the infomorphic forward: samples carry no gradient
    assert not s.requires_grad


def test_backprop_baseline_learns_and_networks_are_independent():
    data = im.load_digits_split(0)
    cfg = im.TrainConfig(n_hidden=10, epochs=4)
    acc = im.backprop_accuracy(cfg, 0, data)
    assert isinstance(acc, float) and acc > 0.6
    accs = im.backprop_accuracy(cfg, [0, 1])
    assert accs.shape == (2,) and (accs > 0.6).all()
    # a list of seeds trains independent networks: the first equals the one-network run on its own split
    assert accs[0] == pytest.approx(im.backprop_accuracy(cfg, [0, 5])[0])
    with pytest.raises(ValueError, match="trivariate"):
        im.backprop_accuracy(with_(cfg, hidden="context"), 0, data)
    with pytest.raises(ValueError, match="lr"):
        im.backprop_accuracy(cfg, 0, data, lr=0.0)


def test_run_models_with_own_splits_per_replicate():
    cfg = im.TrainConfig(n_hidden=6, epochs=2)
    r = im.run_models(cfg, [3, 4], goals=["trivariate heuristic", "unique F"])
    assert r["accuracy"].shape == (2, 2) and r["atoms"].shape == (2, 2, 2, 19)
    # replicate 0 does not depend on which network sits beside it
    r2 = im.run_models(cfg, [3, 9], goals=["trivariate heuristic", "unique F"])
    with pytest.raises(ValueError, match="list of seeds"):
        im.run_models(cfg, [3, 4], replicates=2)
    with pytest.raises(ValueError, match="list of ints"):
        im.run_models(cfg, [])
    np.testing.assert_allclose(r["accuracy"][:, 0], r2["accuracy"][:, 0])
    np.testing.assert_allclose(r["atoms"][:, :, 0], r2["atoms"][:, :, 0], rtol=1e-5, atol=1e-6)
    assert not np.allclose(r["atoms"][:, :, 1], r2["atoms"][:, :, 1])


def test_an_explicit_cpu_device_gives_the_same_numbers():
    """Issue 37: the networks train and are tested on a device argument (the GPU when present); on the CPU,
    passing device="cpu" explicitly changes nothing, bit for bit."""
    cfg = im.TrainConfig(n_hidden=6, epochs=2)
    goals = ["trivariate heuristic", "trivariate optimised"]
    a, b = im.run_models(cfg, [3, 4], goals=goals), im.run_models(cfg, [3, 4], goals=goals, device="cpu")
    assert np.array_equal(a["accuracy"], b["accuracy"]) and np.array_equal(a["atoms"], b["atoms"])
    c = with_(cfg, hidden="context", goal="context heuristic")
    assert np.array_equal(im.run_models(c, 3)["atoms"], im.run_models(c, 3, device="cpu")["atoms"])
    assert im.backprop_accuracy(cfg, 3) == im.backprop_accuracy(cfg, 3, device="cpu")


def test_networks_run_on_their_device_with_the_cpus_random_draws():
    """On the meta device (which computes nothing) a layer's forward pass, the soft histograms, the PID
    atoms of both layers and the surrogate gradient run without touching the CPU, which would fail on a
    CPU tensor made inside; the units' random draws still come from the CPU's generator, as on the CPU."""
    cfg = im.TrainConfig(n_hidden=4)
    net = im.InfoNet(6, 3, cfg, n_models=2).to("meta")
    x, y1 = torch.zeros(5, 2, 6, device="meta"), torch.zeros(5, 2, 3, device="meta")
    srcs, theta, s = net.hidden_forward(x, y1)
    assert _atoms(srcs, theta, cfg.bins_hidden).device.type == "meta"
    atoms_o = _atoms([net.output_drive(s), 2 * y1 - 1], net.output_theta(s), [cfg.bins_output, 2])
    assert atoms_o.shape == (2 * 3, 5) and atoms_o.device.type == "meta"
    _, _, s = net.hidden_forward(x, y1, surrogate=True)
    s.sum().backward()
    assert net.ff_w.grad.device.type == "meta"
    # two passes (lateral), each a draw of 5 x 2 x 4 uniforms from the CPU generator
    torch.manual_seed(0)
    net.hidden_forward(x, y1)
    after_meta = torch.rand(3)
    torch.manual_seed(0)
    torch.rand(2, 5, 2, 4)
    assert torch.equal(after_meta, torch.rand(3))
