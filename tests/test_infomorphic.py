"""Unit tests for companion_lib.infomorphic (Schneider, Neuhaus, Ehrlich et al., ICLR 2025)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from companion_lib import infomorphic as im
from companion_lib.infomorphic.network import with_


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
    cfg = im.TrainConfig(n_hidden=10, epochs=4)
    r = im.run_experiment(cfg, 0, data)
    assert r["accuracy"] > 0.4 and r["atoms"].shape == (4, 19)
    assert len(r["atom_labels"]) == 19
    assert im.backprop_accuracy(10, 0, data) > 0.8
    with pytest.raises(ValueError, match="hidden"):
        im.run_experiment(with_(cfg, hidden="deep"), 0, data)
    with pytest.raises(ValueError, match="goal"):
        im.run_experiment(with_(cfg, goal="nonsense"), 0, data)
    with pytest.raises(ValueError, match="n_hidden"):
        im.run_experiment(with_(cfg, n_hidden=0), 0, data)
    with pytest.raises(ValueError, match="bins"):
        im.run_experiment(with_(cfg, bins_hidden=0), 0, data)
