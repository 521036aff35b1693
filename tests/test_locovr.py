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


# The fast forms below must give bitwise the numbers of the plain array forms they replace (the book's
# results were computed with those): each is compared here with the array form written out.

def _reference_walk(occ, clear, gx, gy, routes, x, goals, v0, p):
    """The simulator's time loop in its plain array form (social_forces, np.linalg.norm, np.cumsum, np.clip)."""
    size = occ.shape[0]

    def target(route, k, x):
        d = np.linalg.norm(route[k:] - x, axis=1)
        k = k + int(np.argmin(d[: max(1, int(6 / (lv.ROOM_M / 64)))]))
        ahead = np.cumsum(np.r_[0, np.linalg.norm(np.diff(route[k:], axis=0), axis=1)])
        return route[min(k + int(np.searchsorted(ahead, p.lookahead)), len(route) - 1)], k

    def cell(q):
        return (int(np.clip(q[1] // (lv.ROOM_M / size), 0, size - 1)), int(np.clip(q[0] // (lv.ROOM_M / size), 0, size - 1)))

    x, v, ks, arrived, traj = x.copy(), np.zeros((2, 2)), [0, 0], np.zeros(2, dtype=bool), [x.copy()]
    for _ in range(int(p.max_time / p.dt)):
        e = np.zeros((2, 2))
        for i in range(2):
            tgt, ks[i] = target(routes[i], ks[i], x[i])
            d = tgt - x[i]
            e[i] = d / (np.linalg.norm(d) + 1e-9)
        f = lv.social_forces(x, v, e, v0, p)
        for i in range(2):
            r, c = cell(x[i])
            grad = np.array([gx[r, c], gy[r, c]])
            gn = np.linalg.norm(grad)
            if gn > 0:
                f[i] += p.A_wall * np.exp((p.radius - clear[r, c]) / p.B_wall) * grad / gn
        v = v + p.dt * f
        speed = np.linalg.norm(v, axis=1, keepdims=True)
        v = np.where(speed > 1.3 * v0[:, None], v * 1.3 * v0[:, None] / np.maximum(speed, 1e-9), v)
        v[arrived] = 0.0
        for i in range(2):
            if arrived[i]:
                continue
            new = x[i] + p.dt * v[i]
            if occ[cell(new)]:
                for trial in (np.array([new[0], x[i][1]]), np.array([x[i][0], new[1]])):
                    if not occ[cell(trial)]:
                        new = trial
                        break
                else:
                    new = x[i]
                v[i] = (new - x[i]) / p.dt
            x[i] = new
            if np.linalg.norm(x[i] - goals[i]) < p.goal_tol:
                arrived[i] = True
                v[i] = 0.0
        traj.append(x.copy())
        if arrived[0]:
            break
    return np.array(traj), bool(arrived[0])


def test_fast_walk_is_bitwise_the_array_form():
    from companion_lib.locovr import sim
    p = lv.SocialForceParams()
    for seed in range(6):
        rng = np.random.default_rng(seed)
        occ = lv.make_floorplan(rng)
        clear, gy, gx, cost, free = sim._layout_maps(occ.tobytes(), occ.shape)
        assert np.array_equal(clear, lv.clearance_m(occ)) and np.array_equal(cost, lv.route_cost(occ))
        assert np.array_equal(free, np.argwhere(lv.clearance_m(occ) >= 0.35))
        r1, r2 = np.random.default_rng(seed), np.random.default_rng(seed)
        assert np.array_equal(lv.sample_free_point(r1, occ, free=free), lv.sample_free_point(r2, occ))
        s1, g1, s2, g2 = (lv.sample_free_point(rng, occ) for _ in range(4))
        if seed % 2:             # head-on: person 2 walks person 1's route backwards
            s2, g2 = g1 + 0.05, s1 + 0.05
            s2, g2 = (q if not occ[lv.to_cell(q, 64)] else q - 0.05 for q in (s2, g2))
        routes = [np.vstack([lv.astar_route(occ, a, b, cost)[:-1], b]) for a, b in ((s1, g1), (s2, g2))]
        args = (occ, clear, gx, gy, routes, np.array([s1, s2]), np.array([g1, g2]), rng.uniform(1.0, 1.4, 2), p)
        fast, ref = sim._walk(*args), _reference_walk(*args)
        assert fast[1] == ref[1] and fast[0].shape == ref[0].shape and fast[0].tobytes() == ref[0].tobytes()


def test_fast_helpers_are_bitwise_the_array_forms():
    from companion_lib.locovr import sim, tasks
    rng = np.random.default_rng(3)
    for _ in range(50):
        route = np.cumsum(rng.uniform(-0.2, 0.2, size=(int(rng.integers(2, 80)), 2)), axis=0) + 5
        k, x = int(rng.integers(0, len(route))), rng.uniform(3, 7, 2)
        d = np.linalg.norm(route[k:] - x, axis=1)
        k_ref = k + int(np.argmin(d[:38]))
        ahead = np.cumsum(np.r_[0, np.linalg.norm(np.diff(route[k_ref:], axis=0), axis=1)])
        ref = route[min(k_ref + int(np.searchsorted(ahead, 1.0)), len(route) - 1)]
        for seg in (None, np.linalg.norm(np.diff(route, axis=0), axis=1).tolist()):
            tgt, k_new = sim._target(route, k, x, 1.0, seg)
            assert k_new == k_ref and tgt.tobytes() == ref.tobytes()
    for q in rng.uniform(-2, 12, size=(200, 2)):
        assert lv.to_cell(q, 64) == (int(np.clip(q[1] // (10 / 64), 0, 63)), int(np.clip(q[0] // (10 / 64), 0, 63)))
    for n in (1, 5):
        pts = rng.uniform(0, 10, size=(n, 2))
        g = (np.arange(32) + 0.5) * (10 / 32)
        X, Y = np.meshgrid(g, g)
        ref = np.zeros((32, 32))
        for q in pts:
            ref = np.maximum(ref, np.exp(-((X - q[0]) ** 2 + (Y - q[1]) ** 2) / (2 * (10 / 32) ** 2)))
        assert tasks._blobs(pts, 32).tobytes() == ref.tobytes()
