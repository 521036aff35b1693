r"""The reproduce page's experiment: LocoVR-mini (many homes) vs THOR-mini (few homes) on unseen homes."""

from __future__ import annotations

import time

import numpy as np
import torch

from .metrics import ade_fde, min_separation, path_efficiency
from .floorplan import downsample
from .tasks import (constant_velocity, generate_dataset, goal_errors, goal_from_map, goal_targets, make_samples,
                    nearest_furniture_goal, path_chamfers, predict_maps, predict_trajectory, rasterise,
                    train_trajectory, train_unet)

__all__ = ["dataset_stats", "run_experiment", "map_tasks", "clears_margin"]


def clears_margin(a: list, b: list, margin: float, strict: bool = False, level: float = 0.95) -> bool:
    r"""Whether errors ``a`` beat errors ``b`` by the ratio ``margin``: mean(a) <= margin * mean(b).

    ``a`` and ``b`` are lists (one entry per seed) of paired per-sample errors. The plain form pools
    all samples of all seeds. The strict form, for rows declared not to reproduce, also asks it of every
    seed on its own and of the upper end of the one-sided ``level`` interval of the paired differences
    $a_i - \mathrm{margin}\, b_i$ (normal approximation over the pooled samples), so that a lucky seed
    or a lucky test set cannot make the row hold."""
    if len(a) != len(b) or len(a) == 0:
        raise ValueError(f"a and b must be non-empty lists of equal length, got {len(a)} and {len(b)}")
    for x, y in zip(a, b):
        if np.shape(x) != np.shape(y) or np.size(x) == 0:
            raise ValueError(f"a and b must hold paired, non-empty error arrays, got {np.shape(x)} and {np.shape(y)}")
    A, B = np.concatenate(a), np.concatenate(b)
    ok = bool(A.mean() <= margin * B.mean())
    if not strict:
        return ok
    from scipy.stats import norm
    d = A - margin * B
    upper = d.mean() + norm.ppf(level) * d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else d.mean()
    return bool(ok and all(np.mean(x) <= margin * np.mean(y) for x, y in zip(a, b)) and upper <= 0)


def dataset_stats(episodes) -> dict:
    """Path efficiency of person 1, minimum separation, speed and duration per episode."""
    eff = np.array([path_efficiency(e.p1) for e in episodes])
    sep = np.array([min_separation(e.p1, e.p2) for e in episodes])
    dur = np.array([(len(e.p1) - 1) / 15 for e in episodes])
    length = np.array([np.linalg.norm(np.diff(e.p1, axis=0), axis=1).sum() for e in episodes])
    return {"efficiency": eff, "min_sep": sep, "duration": dur, "speed": length / dur}


def run_experiment(seed: int, n_train: int = 160, many: int = 40, few: int = 4, n_test_layouts: int = 16,
                   n_test: int = 96, traj_steps: int = 600, interaction_m: float = 1.5, unet_steps: int = 0,
                   unet_batch: int = 32, unet_width: int = 8) -> dict:
    """Trajectory task: MLPs trained on LocoVR-mini (many homes) and THOR-mini (few homes), with and
    without person 2's features, scored with constant velocity on unseen homes; with ``unet_steps > 0``
    also the path and goal tasks (:func:`map_tasks`) on the same data."""
    torch.set_num_threads(1)
    t0 = time.process_time()
    train = {"LocoVR-mini": generate_dataset(many, n_train, seed=10_000 + seed),
             "THOR-mini": generate_dataset(few, n_train, seed=20_000 + seed)}
    test_eps = generate_dataset(n_test_layouts, n_test, seed=30_000 + seed)
    test = make_samples(test_eps, per_episode=2, seed=seed)
    t_data = time.process_time() - t0
    # interaction subset: person 2 within interaction_m of person 1 at the cut time
    near = np.linalg.norm(test["past2"][:, -1] - test["past1"][:, -1], axis=1) < interaction_m
    cv = constant_velocity(test)
    errors = {"constant velocity": np.linalg.norm(cv - test["fut1"], axis=-1).mean(axis=1)}
    rows = [{"model": "constant velocity", "train": "-", "p2": False,
             "ade": ade_fde(constant_velocity(test), test["fut1"])[0],
             "fde": ade_fde(constant_velocity(test), test["fut1"])[1],
             "ade_near": ade_fde(constant_velocity(test)[near], test["fut1"][near])[0] if near.any() else np.nan}]
    for name, eps in train.items():
        tr = make_samples(eps, per_episode=3, seed=seed + 1)
        for use_p2 in (True, False):
            net = train_trajectory(tr, use_p2=use_p2, steps=traj_steps, seed=seed)
            pred = predict_trajectory(net, test, use_p2)
            ade, fde = ade_fde(pred, test["fut1"])
            errors[name + (" + p2" if use_p2 else "")] = np.linalg.norm(pred - test["fut1"], axis=-1).mean(axis=1)
            rows.append({"model": "MLP", "train": name, "p2": use_p2, "ade": ade, "fde": fde,
                         "ade_near": ade_fde(pred[near], test["fut1"][near])[0] if near.any() else np.nan})
    t_traj = time.process_time() - t0
    maps = (map_tasks(train, test, seed, steps=unet_steps, batch=unet_batch, width=unet_width)
            if unet_steps > 0 else None)
    return {"seed": seed, "rows": rows, "errors": errors, "near": near, "maps": maps, "t_traj": t_traj, "n_test": len(near), "n_near": int(near.sum()),
            "train_stats": dataset_stats(train["LocoVR-mini"]), "test_stats": dataset_stats(test_eps),
            "example": {"episode": test_eps[0]}, "t_data": t_data, "t_total": time.process_time() - t0}


def map_tasks(train: dict, test: dict, seed: int, steps: int = 200, batch: int = 32, width: int = 8,
              res: int = 32) -> dict:
    r"""Path and goal U-Nets trained on each training set, scored per test sample on unseen homes.

    Path task: Chamfer distance (m) of the path extracted from the predicted map, and of the A* shortest
    path, to the walked rest of the path. Goal task: distance (m) of the arg-max goal, of the nearest
    furniture ahead, and the *expected* distance of a uniformly random free cell (the random baseline
    averaged over all its draws). Returns per-sample arrays, the training seconds and one example."""
    occ_c = [downsample(o, o.shape[0] // res) for o in test["occ"]]
    Xp_test, _ = rasterise(test, res)
    Xg_test = np.ascontiguousarray(Xp_test[:, :-1])   # = rasterise(test, res, with_goal=False)[0]
    rand = []
    for o, g in zip(occ_c, test["goal"]):
        free = (np.argwhere(~o)[:, ::-1] + 0.5) * (10.0 / res)
        rand.append(np.linalg.norm(free - g, axis=1).mean())
    near = np.array([nearest_furniture_goal(o, p) for o, p in zip(occ_c, test["past1"])])
    chamfer = {"A*": path_chamfers(None, test)}
    goal = {"random": np.array(rand), "nearest furniture": goal_errors(near, test)}
    example = {"sample": 0, "occ": test["occ"][0], "start": test["past1"][0, -1], "goal": test["goal"][0],
               "walked": test["path"][0], "past1": test["past1"][0], "nearest": near[0]}
    secs = {}
    for name, eps in train.items():
        t = time.process_time()
        tr = make_samples(eps, per_episode=3, seed=seed + 1)
        X, Y = rasterise(tr, res)
        net = train_unet(X, Y, steps=steps, batch=batch, width=width, seed=seed)
        prob = predict_maps(net, Xp_test)
        chamfer[name] = path_chamfers(prob, test)
        Xg = np.ascontiguousarray(X[:, :-1])            # = rasterise(tr, res, with_goal=False)[0]
        gnet = train_unet(Xg, goal_targets(tr, res), loss="ce", steps=steps, batch=batch, width=width, seed=seed)
        gmap = predict_maps(gnet, Xg_test)
        pred = np.array([goal_from_map(m, o) for m, o in zip(gmap, occ_c)])
        goal[name] = goal_errors(pred, test)
        example[name] = {"path_prob": prob[0], "goal_map": gmap[0], "goal_pred": pred[0]}
        secs[name] = time.process_time() - t
    return {"chamfer": chamfer, "goal": goal, "example": example, "seconds": secs}
