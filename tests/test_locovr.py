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


def test_floorplan_attempts_are_bounded():
    with pytest.raises(RuntimeError, match="attempts"):
        lv.make_floorplan(np.random.default_rng(0), max_attempts=0)
    with pytest.raises(ValueError, match="size"):
        lv.make_floorplan(np.random.default_rng(0), size=8)


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
    n_map = len(lv.tasks.PATCH_FORWARD) * len(lv.tasks.PATCH_SIDE)
    assert lv.trajectory_features(s).shape == (8, 36 + n_map)
    assert lv.trajectory_features(s, False).shape == (8, 32 + n_map)
    assert lv.trajectory_features(s, False, use_map=False).shape == (8, 32)
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
    r = lv.run_experiment(0, n_train=8, many=4, few=2, single=2, n_test_layouts=2, n_test=4, traj_steps=20,
                          unet_steps=0)
    assert r["maps"] is None and r["n_test"] == 8
    assert set(r["errors"]) == {"constant velocity", *lv.TRAJECTORY_MODELS}
    assert set(r["test_stats"]) == {"efficiency", "min_sep", "duration", "speed"}
    with pytest.raises(ValueError, match="unet_steps"):
        lv.run_experiment(0, unet_steps=-1)


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
    r = lv.run_experiment(0, n_train=6, many=3, few=1, single=1, n_test_layouts=2, n_test=3, traj_steps=10,
                          unet_steps=3)
    m = r["maps"]
    assert set(m["chamfer"]) == {"A*", "LocoVR-mini", "THOR-mini"}
    assert set(m["goal"]) == {"random", "nearest furniture", "LocoVR-mini", "THOR-mini"}
    assert all(len(v) == 6 for v in m["chamfer"].values()) and all(len(v) == 6 for v in m["goal"].values())
    assert m["example"]["LocoVR-mini"]["path_prob"].shape == (32, 32)
    assert set(r["errors"]) == {"constant velocity", "LocoVR-mini + p2", "LocoVR-mini", "THOR-mini + p2", "GIMO-mini"}
    assert all(len(v) == 6 for v in r["errors"].values()) and r["near"].shape == (6,)


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


def test_social_forces_closed_form():
    p = lv.SocialForceParams()
    # one person: only the relaxation towards the desired velocity, (v0 e - v) / tau
    f = lv.social_forces([[1.0, 2.0]], [[0.2, -0.1]], [[0.6, 0.8]], [1.2], p)
    assert f.shape == (1, 2)
    assert f[0] == pytest.approx([(1.2 * 0.6 - 0.2) / p.tau, (1.2 * 0.8 + 0.1) / p.tau], rel=1e-12)
    # two people side by side, at rest, both heading +y: equal and opposite repulsion along x, of the
    # closed-form size A exp((2r - d)/B) w(0), on top of the attraction
    d = 0.9
    x, v, e = np.array([[0.0, 0.0], [d, 0.0]]), np.zeros((2, 2)), np.array([[0.0, 1.0], [0.0, 1.0]])
    f = lv.social_forces(x, v, e, np.array([1.0, 1.0]), p)
    push = p.A * np.exp((2 * p.radius - d) / p.B) * lv.anisotropy(0.0, p.lam)
    assert f[0] == pytest.approx([-push, 1.0 / p.tau], rel=1e-7)   # (the 1e-9 m added to d)
    assert f[1] == pytest.approx([push, 1.0 / p.tau], rel=1e-7)
    # a person straight ahead pushes harder than one straight behind (anisotropy)
    ahead = lv.social_forces([[0, 0], [0, d]], np.zeros((2, 2)), [[0, 1], [0, 1]], [0, 0], p)[0, 1]
    behind = lv.social_forces([[0, 0], [0, -d]], np.zeros((2, 2)), [[0, 1], [0, 1]], [0, 0], p)[0, 1]
    assert -ahead == pytest.approx(behind / p.lam, rel=1e-7)


def test_social_forces_sidestep_to_the_right_when_head_on():
    p = lv.SocialForceParams()
    x, e = np.array([[0.0, 0.0], [0.0, 2.0]]), np.array([[0.0, 1.0], [0.0, -1.0]])
    approaching = lv.social_forces(x, np.array([[0.0, 1.0], [0.0, -1.0]]), e, [1.0, 1.0], p)
    leaving = lv.social_forces(x, np.array([[0.0, -1.0], [0.0, 1.0]]), e, [1.0, 1.0], p)
    # person 0 walks +y: its right is +x; person 1 walks -y: its right is -x
    assert approaching[0, 0] == pytest.approx(p.sidestep) and approaching[1, 0] == pytest.approx(-p.sidestep)
    assert leaving[:, 0] == pytest.approx([0.0, 0.0], abs=1e-12)
    with pytest.raises(ValueError, match="same one or two people"):
        lv.social_forces(np.zeros((2, 2)), np.zeros((1, 2)), np.zeros((2, 2)), [1.0, 1.0])


def test_wall_force_closed_form(occ):
    p = lv.SocialForceParams()
    clear = lv.clearance_m(occ)
    gy, gx = np.gradient(clear)
    r, c = np.argwhere((np.hypot(gx, gy) > 0) & ~occ)[10]
    f = lv.wall_force(clear, gx, gy, (r, c), p)
    g = np.array([gx[r, c], gy[r, c]])
    assert f == pytest.approx(p.A_wall * np.exp((p.radius - clear[r, c]) / p.B_wall) * g / np.linalg.norm(g))
    flat = np.zeros((4, 4))
    assert (lv.wall_force(flat + 1, flat, flat, (1, 1), p) == 0).all()


def test_simulator_integrates_social_forces(occ, monkeypatch):
    """The time loop calls the library's social_forces once per step, and its output moves the people."""
    from companion_lib.locovr import sim
    calls = []
    real = sim.social_forces

    def counting(*args, **kwargs):
        calls.append(len(args[0]))
        return real(*args, **kwargs)

    monkeypatch.setattr(sim, "social_forces", counting)
    ep = lv.simulate_episode(occ, np.random.default_rng(5))
    assert len(calls) == len(ep.p1) - 1 and set(calls) == {2}
    monkeypatch.setattr(sim, "social_forces", lambda x, v, e, v0, p: np.zeros((len(x), 2)))
    still = lv.simulate_episode(occ, np.random.default_rng(5))
    # without any force nobody starts walking (walls only push people near them)
    assert np.linalg.norm(still.p1[-1] - still.p1[0]) < np.linalg.norm(ep.p1[-1] - ep.p1[0])
    assert not still.reached


def test_single_person_episodes_and_samples(occ):
    rng = np.random.default_rng(2)
    ep = lv.simulate_episode(occ, rng, partner=False)
    assert ep.p2 is None and ep.goal2 is None and ep.p1.shape[1] == 2
    eps = lv.generate_dataset(2, 3, seed=4, partner=False)
    assert all(e.p2 is None and e.reached for e in eps)
    s = lv.make_samples(eps, per_episode=2)
    assert np.isnan(s["past2"]).all() and np.isfinite(s["past1"]).all()
    with pytest.raises(ValueError, match="second person"):
        lv.trajectory_features(s, use_p2=True)
    X, _ = lv.rasterise(s, 32)
    assert (X[:, 2] == 0).all() and X[:, 1].max() > 0      # the absent person's channel is empty
    st = lv.dataset_stats(eps)
    assert np.isnan(st["min_sep"]).all() and (st["efficiency"] > 0).all()


def test_map_patch_reads_the_map_in_the_heading_frame():
    occ = np.zeros((64, 64), bool)
    occ[0, :] = occ[-1, :] = occ[:, 0] = occ[:, -1] = True
    wall_east, wall_west = occ.copy(), occ.copy()
    wall_east[:, 45] = True          # x in [7.03, 7.19) m
    wall_west[:, 63 - 45] = True     # the mirror image
    t = np.arange(lv.OBS)[:, None] * 0.07
    east = {"past1": (np.array([5.0, 5.0]) + t * [1, 0])[None] - [0.98, 0], "occ": [wall_east]}
    west = {"past1": (np.array([5.0, 5.0]) - t * [1, 0])[None] + [0.98, 0], "occ": [wall_west]}
    pe, pw = lv.map_patch(east), lv.map_patch(west)
    assert pe.shape == (1, len(lv.tasks.PATCH_FORWARD) * len(lv.tasks.PATCH_SIDE))
    assert pe.min() < 0.2 and pe.max() == lv.tasks.CLEAR_CAP    # the wall ahead is seen, open space is capped
    np.testing.assert_allclose(pe, pw, atol=0.2)                 # mirror homes, mirror walks: the same view
    open_ = {"past1": east["past1"], "occ": [occ]}
    assert (lv.map_patch(open_) >= pe).all() and lv.map_patch(open_).min() > 0


def test_an_explicit_cpu_device_gives_the_same_numbers():
    """Issue 37: the MLPs and U-Nets train and predict on a device argument (the GPU when present); on the
    CPU, passing device="cpu" explicitly changes nothing, bit for bit, and the models are built where asked
    (on the meta device, which allocates nothing, a feature left on the CPU would make the MLP raise)."""
    from companion_lib.common import module_device
    torch.set_num_threads(1)
    kw = dict(n_train=4, many=2, few=1, single=1, n_test_layouts=1, n_test=2, traj_steps=5, unet_steps=0)
    a, b = lv.run_experiment(0, **kw), lv.run_experiment(0, device="cpu", **kw)
    assert a["errors"].keys() == b["errors"].keys() and np.array_equal(a["near"], b["near"])
    assert all(np.array_equal(a["errors"][k], b["errors"][k]) for k in a["errors"])
    s = lv.make_samples(lv.generate_dataset(1, 2, seed=1), per_episode=2)
    train = {"LocoVR-mini": lv.generate_dataset(1, 2, seed=2)}
    a, b = (lv.map_tasks(train, s, 0, steps=2, batch=2, width=2, device=d) for d in (None, "cpu"))
    for task in ("chamfer", "goal"):
        assert a[task].keys() == b[task].keys()
        assert all(np.array_equal(a[task][k], b[task][k]) for k in a[task])
    ex_a, ex_b = a["example"]["LocoVR-mini"], b["example"]["LocoVR-mini"]
    assert all(np.array_equal(ex_a[k], ex_b[k]) for k in ex_a)
    n1, n2 = lv.train_trajectory(s, steps=3), lv.train_trajectory(s, steps=3, device="cpu")
    assert module_device(n2).type == "cpu"
    assert all(torch.equal(u, v) for u, v in zip(n1.state_dict().values(), n2.state_dict().values()))
    assert np.array_equal(lv.predict_trajectory(n1, s), lv.predict_trajectory(n2, s))
    X, Y = lv.rasterise(s, 32)
    meta = lv.train_trajectory(s, steps=1, device="meta")
    assert module_device(meta).type == "meta"
    with pytest.raises(NotImplementedError, match="meta"):   # the forward ran on meta; only the copy out fails
        lv.predict_trajectory(meta, s)
    for loss, target in (("bce", Y), ("ce", lv.goal_targets(s))):
        assert module_device(lv.train_unet(X, target, loss=loss, steps=1, batch=2, width=2, device="meta")).type == "meta"
