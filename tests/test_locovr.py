"""Unit tests of companion_lib.locovr (floor plans, A*, social-force simulator, tasks, metrics)."""

import networkx as nx
import numpy as np
import pytest
import torch

from companion_lib import locovr as lv


@pytest.fixture(scope="module")
def occ():
    return lv.make_floorplan(np.random.default_rng(0))


def test_floorplan_connected_with_walls(occ):
    assert occ.shape == (64, 64) and occ[0].all() and occ[:, -1].all()
    lv.check_connected(occ)
    assert 0.1 < occ.mean() < 0.5


def test_disconnected_plan_rejected():
    occ = np.zeros((20, 20), bool)
    occ[:, 10] = True
    with pytest.raises(ValueError, match="connected components"):
        lv.check_connected(occ)


def test_astar_matches_networkx_shortest_path():
    rng = np.random.default_rng(1)
    occ = rng.random((12, 12)) < 0.2
    occ[0, 0] = occ[11, 11] = False
    _, n = __import__("scipy.ndimage", fromlist=["label"]).label(~occ, structure=np.ones((3, 3)))
    G = nx.Graph()
    for r in range(12):
        for c in range(12):
            if occ[r, c]:
                continue
            for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
                rr, cc = r + dr, c + dc
                if 0 <= rr < 12 and 0 <= cc < 12 and not occ[rr, cc]:
                    G.add_edge((r, c), (rr, cc), weight=float(np.hypot(dr, dc)))
    if not nx.has_path(G, (0, 0), (11, 11)):
        pytest.skip("random grid disconnected")
    ref = nx.astar_path_length(G, (0, 0), (11, 11), heuristic=lambda a, b: np.hypot(a[0] - b[0], a[1] - b[1]))
    cell = lv.ROOM_M / 12
    route = lv.astar_route(occ, np.array([0.5, 0.5]) * cell, np.array([11.5, 11.5]) * cell)
    length = np.linalg.norm(np.diff(route, axis=0), axis=1).sum() / cell
    assert length == pytest.approx(ref, rel=1e-9)


def test_astar_rejects_start_or_goal_in_obstacle(occ):
    wall = np.array([0.05, 5.0])
    free = lv.sample_free_point(np.random.default_rng(0), occ)
    with pytest.raises(ValueError, match="start"):
        lv.astar_route(occ, wall, free)
    with pytest.raises(ValueError, match="goal"):
        lv.astar_route(occ, free, wall)


def test_simulator_no_agent_in_wall_and_stops_at_goal(occ):
    rng = np.random.default_rng(3)
    n_reached = 0
    for _ in range(6):
        ep = lv.simulate_episode(occ, rng)
        assert ep.p1.shape == ep.p2.shape and ep.p1.shape[1] == 2
        for p in np.vstack([ep.p1, ep.p2]):
            assert not occ[lv.to_cell(p, 64)]
        if ep.reached:
            n_reached += 1
            assert np.linalg.norm(ep.p1[-1] - ep.goal1) < lv.SocialForceParams().goal_tol
    assert n_reached >= 4


def test_bad_time_step():
    with pytest.raises(ValueError, match="dt"):
        lv.SocialForceParams(dt=0)


def test_anisotropy_and_repulsion_direction():
    assert lv.anisotropy(1.0) == pytest.approx(1.0) and lv.anisotropy(-1.0) == pytest.approx(0.3)
    x = np.array([[0.0, 0.0], [1.0, 0.0]])
    v = np.zeros((2, 2))
    e = np.array([[0.0, 1.0], [0.0, 1.0]])
    f = lv.social_forces(x, v, e, np.array([1.0, 1.0]))
    assert f[0, 0] < 0 < f[1, 0]              # pushed apart along x
    assert f[0, 1] == pytest.approx(2.0)      # goal attraction v0/tau from rest


def test_metrics_identities():
    P = np.c_[np.linspace(0, 3, 31), np.zeros(31)]
    assert lv.chamfer(P, P) == 0.0
    assert lv.chamfer(P, P + [0, 0.5]) == pytest.approx(0.5)
    assert lv.path_efficiency(P) == pytest.approx(1.0)
    ade, fde = lv.ade_fde(P + [0.3, 0.4], P)
    assert ade == pytest.approx(0.5) and fde == pytest.approx(0.5)
    assert lv.min_separation(P, P + [0, 2.0]) == pytest.approx(2.0)
    assert lv.goal_error(P[:2], P[:2] + [3, 4]) == pytest.approx(5.0)


def test_metrics_bad_input():
    with pytest.raises(ValueError, match="same shape"):
        lv.ade_fde(np.zeros((5, 2)), np.zeros((6, 2)))
    with pytest.raises(ValueError, match="equal length"):
        lv.min_separation(np.zeros((5, 2)), np.zeros((6, 2)))
    with pytest.raises(ValueError, match="NaN"):
        lv.chamfer(np.full((2, 2), np.nan), np.zeros((2, 2)))


def test_dataset_samples_and_constant_velocity():
    eps = lv.generate_dataset(2, 4, seed=0)
    assert {e.layout for e in eps} == {0, 1} and all(e.reached for e in eps)
    s = lv.make_samples(eps, per_episode=2)
    assert s["past1"].shape == (8, lv.OBS, 2) and s["fut1"].shape == (8, lv.FUT, 2)
    cv = lv.constant_velocity(s)
    assert cv.shape == s["fut1"].shape
    X, Y = lv.rasterise(s, 32)
    assert X.shape == (8, 4, 32, 32) and Y.shape == (8, 1, 32, 32) and Y.sum() > 0
    assert lv.trajectory_features(s).shape == (8, 36) and lv.trajectory_features(s, False).shape == (8, 32)
    with pytest.raises(ValueError):
        lv.generate_dataset(0, 3, seed=0)


def test_models_train_and_predict():
    torch.set_num_threads(1)
    eps = lv.generate_dataset(2, 4, seed=1)
    s = lv.make_samples(eps, per_episode=2)
    net = lv.train_trajectory(s, steps=200)
    pred = lv.predict_trajectory(net, s)
    assert pred.shape == s["fut1"].shape
    assert lv.ade_fde(pred, s["fut1"])[0] < lv.ade_fde(lv.constant_velocity(s), s["fut1"])[0]
    X, Y = lv.rasterise(s, 32)
    unet = lv.train_unet(X, Y, steps=5)
    prob = lv.predict_maps(unet, X)
    assert prob.shape == (8, 32, 32) and (0 <= prob).all() and (prob <= 1).all()
    path = lv.extract_path(prob[0], s["occ"][0], s["past1"][0, -1], s["goal"][0])
    assert path.shape[1] == 2 and lv.chamfer(path, path) == 0.0
    with pytest.raises(ValueError, match="loss"):
        lv.train_unet(X, Y, loss="l1")
    occ_c = lv.downsample(s["occ"][0])
    g = lv.goal_from_map(prob[0], occ_c)
    assert not occ_c[lv.to_cell(g, 32)]
    assert not occ_c[lv.to_cell(lv.random_goal_baseline(occ_c, np.random.default_rng(0)), 32)]


def test_experiment_small():
    r = lv.run_experiment(0, n_train=8, many=4, few=2, n_test_layouts=2, n_test=4, traj_steps=20)
    assert len(r["rows"]) == 5 and r["n_test"] == 8
    assert set(r["test_stats"]) == {"efficiency", "min_sep", "duration", "speed"}


def test_downsample_keeps_walls_and_connectivity():
    rng = np.random.default_rng(5)
    for _ in range(20):
        occ = lv.make_floorplan(rng)
        c = lv.downsample(occ)
        assert c.shape == (32, 32) and c[0].all() and c[:, 0].all() and c[-1].all() and c[:, -1].all()
        lv.check_connected(c)
        # every fine obstacle cell lies in a coarse obstacle cell
        assert c.repeat(2, 0).repeat(2, 1)[occ].all()


def test_goal_targets_and_baselines():
    eps = lv.generate_dataset(2, 4, seed=2)
    s = lv.make_samples(eps, per_episode=2)
    Y = lv.goal_targets(s, 32)
    assert Y.shape == (8, 1, 32, 32) and np.allclose(Y.sum(axis=(1, 2, 3)), 1)
    for i in range(8):
        occ_c = lv.downsample(s["occ"][i])
        assert Y[i, 0][occ_c].sum() == 0
        assert np.unravel_index(Y[i, 0].argmax(), (32, 32)) == lv.to_cell(s["goal"][i], 32)
        g = lv.nearest_furniture_goal(occ_c, s["past1"][i])
        r, c = lv.to_cell(g, 32)
        assert not occ_c[r, c] and occ_c[r - 1:r + 2, c - 1:c + 2].any()
    hot = lv.goal_targets(s, 32, sigma=0)
    assert hot.sum() == 8 and hot.max() == 1
    assert np.allclose(lv.goal_errors(s["goal"], s), 0)
    with pytest.raises(ValueError, match="indoor obstacle"):
        empty = np.zeros((32, 32), bool)
        empty[0] = empty[-1] = empty[:, 0] = empty[:, -1] = True
        lv.nearest_furniture_goal(empty, s["past1"][0])


def test_path_chamfers_astar_matches_baseline():
    eps = lv.generate_dataset(1, 2, seed=3)
    s = lv.make_samples(eps, per_episode=1)
    cd = lv.path_chamfers(None, s)
    ref = lv.chamfer(lv.astar_baseline(s["occ"][0], s["past1"][0, -1], s["goal"][0]), s["path"][0])
    assert cd.shape == (2,) and cd[0] == pytest.approx(ref)
    # a map equal to one everywhere is the A* baseline itself
    assert np.allclose(lv.path_chamfers(np.ones((2, 32, 32)), s), cd)


def test_experiment_with_map_tasks():
    r = lv.run_experiment(0, n_train=6, many=3, few=1, n_test_layouts=2, n_test=3, traj_steps=10, unet_steps=3)
    m = r["maps"]
    assert set(m["chamfer"]) == {"A*", "LocoVR-mini", "THOR-mini"}
    assert set(m["goal"]) == {"random", "nearest furniture", "LocoVR-mini", "THOR-mini"}
    assert all(len(v) == 6 for v in m["chamfer"].values()) and all(len(v) == 6 for v in m["goal"].values())
    assert m["example"]["LocoVR-mini"]["path_prob"].shape == (32, 32)
    assert set(r["errors"]) == {"constant velocity", "LocoVR-mini + p2", "LocoVR-mini", "THOR-mini + p2", "THOR-mini"}
    assert all(len(v) == 6 for v in r["errors"].values()) and r["near"].shape == (6,)


def test_clears_margin_plain_and_strict():
    rng = np.random.default_rng(0)
    b = [np.full(50, 1.0), np.full(50, 1.0)]
    good = [0.8 + 0.01 * rng.standard_normal(50), 0.8 + 0.01 * rng.standard_normal(50)]
    assert lv.clears_margin(good, b, 0.9) and lv.clears_margin(good, b, 0.9, strict=True)
    # one seed misses: the pooled mean clears the margin, the strict form does not
    mixed = [np.full(50, 0.7), np.full(50, 0.95)]
    assert lv.clears_margin(mixed, b, 0.9) and not lv.clears_margin(mixed, b, 0.9, strict=True)
    # noisy: mean below the margin but the interval reaches above it
    noisy = [0.89 + 0.5 * rng.standard_normal(50), 0.89 + 0.5 * rng.standard_normal(50)]
    noisy = [x - x.mean() + 0.89 for x in noisy]
    assert lv.clears_margin(noisy, b, 0.9) and not lv.clears_margin(noisy, b, 0.9, strict=True)
    with pytest.raises(ValueError, match="paired"):
        lv.clears_margin([np.ones(3)], [np.ones(4)], 0.9)
    with pytest.raises(ValueError, match="equal length"):
        lv.clears_margin([np.ones(3)], [], 0.9)
