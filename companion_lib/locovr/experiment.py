r"""The reproduce page's experiment: LocoVR-mini (two people, many homes) against THOR-mini (two people, few
homes) and GIMO-mini (one person), scored on unseen homes."""

from __future__ import annotations

import time

import numpy as np
import torch

from ..common.device import resolve_device
from .metrics import min_separation, path_efficiency
from .floorplan import downsample
from .tasks import (constant_velocity, generate_dataset, goal_errors, goal_from_map, goal_targets, make_samples,
                    nearest_furniture_goal, path_chamfers, predict_maps, predict_trajectory, rasterise,
                    train_trajectory, train_unet)

__all__ = ["dataset_stats", "run_experiment", "map_tasks", "TRAJECTORY_MODELS"]

#: The trajectory models of :func:`run_experiment`: (training set, observes person 2).
TRAJECTORY_MODELS = {"LocoVR-mini + p2": ("LocoVR-mini", True), "LocoVR-mini": ("LocoVR-mini", False),
                     "THOR-mini + p2": ("THOR-mini", True), "GIMO-mini": ("GIMO-mini", False)}


def dataset_stats(episodes) -> dict:
    """Path efficiency of person 1, minimum separation (NaN without a second person), speed and duration
    per episode."""
    eff = np.array([path_efficiency(e.p1) for e in episodes])
    sep = np.array([min_separation(e.p1, e.p2) if e.p2 is not None else np.nan for e in episodes])
    dur = np.array([(len(e.p1) - 1) / 15 for e in episodes])
    length = np.array([np.linalg.norm(np.diff(e.p1, axis=0), axis=1).sum() for e in episodes])
    return {"efficiency": eff, "min_sep": sep, "duration": dur, "speed": length / dur}


def run_experiment(seed: int, n_train: int = 160, many: int = 40, few: int = 4, single: int = 8,
                   n_test_layouts: int = 16, n_test: int = 96, traj_steps: int = 600, interaction_m: float = 1.5,
                   unet_steps: int = 200, unet_batch: int = 16, unet_width: int = 8, device=None) -> dict:
    """One replicate of the reproduce page. Training sets with the same number of episodes:
    LocoVR-mini (two people, ``many`` homes), THOR-mini (two people, ``few`` homes) and GIMO-mini (one
    person, ``single`` homes); a two-person test set in ``n_test_layouts`` unseen homes, cut twice per
    episode. Trajectory task: the MLPs of :data:`TRAJECTORY_MODELS` (all see the local map and the goal)
    and constant velocity, per test window; windows with person 2 within ``interaction_m`` at the cut
    time form the encounter subset. Path and goal tasks (:func:`map_tasks`) on LocoVR-mini and THOR-mini
    (``unet_steps=0`` skips them).

    ``device`` (default :func:`companion_lib.common.device`: the GPU when present, else the CPU) is where the
    MLPs and U-Nets train and predict; the data, the baselines and the scores stay on the CPU, and every
    result comes back as NumPy arrays."""
    if unet_steps < 0:
        raise ValueError(f"unet_steps must be >= 0, got {unet_steps}")
    dev = resolve_device(device)
    torch.set_num_threads(1)
    t0 = time.process_time()
    train = {"LocoVR-mini": generate_dataset(many, n_train, seed=10_000 + seed),
             "THOR-mini": generate_dataset(few, n_train, seed=20_000 + seed),
             "GIMO-mini": generate_dataset(single, n_train, seed=40_000 + seed, partner=False)}
    test_eps = generate_dataset(n_test_layouts, n_test, seed=30_000 + seed)
    test = make_samples(test_eps, per_episode=2, seed=seed)
    t_data = time.process_time() - t0
    # encounter windows: person 2 within interaction_m of person 1 at the cut time
    near = np.linalg.norm(test["past2"][:, -1] - test["past1"][:, -1], axis=1) < interaction_m
    errors = {"constant velocity": np.linalg.norm(constant_velocity(test) - test["fut1"], axis=-1).mean(axis=1)}
    samples = {name: make_samples(eps, per_episode=3, seed=seed + 1) for name, eps in train.items()}
    for name, (data, use_p2) in TRAJECTORY_MODELS.items():
        net = train_trajectory(samples[data], use_p2=use_p2, steps=traj_steps, seed=seed, device=dev)
        pred = predict_trajectory(net, test, use_p2)
        errors[name] = np.linalg.norm(pred - test["fut1"], axis=-1).mean(axis=1)
    t_traj = time.process_time() - t0 - t_data
    maps = (map_tasks({k: train[k] for k in ("LocoVR-mini", "THOR-mini")}, test, seed, steps=unet_steps,
                      batch=unet_batch, width=unet_width, device=dev) if unet_steps > 0 else None)
    return {"seed": seed, "errors": errors, "near": near, "interaction_m": interaction_m, "maps": maps,
            "n_test": len(near), "n_near": int(near.sum()),
            "train_stats": dataset_stats(train["LocoVR-mini"]), "test_stats": dataset_stats(test_eps),
            "example": {"episode": test_eps[0]}, "t_data": t_data, "t_traj": t_traj,
            "t_total": time.process_time() - t0}


def map_tasks(train: dict, test: dict, seed: int, steps: int = 200, batch: int = 16, width: int = 8,
              res: int = 32, device=None) -> dict:
    r"""Path and goal U-Nets trained on each training set, scored per test sample on unseen homes.

    Path task: Chamfer distance (m) of the path extracted from the predicted map, and of the A* shortest
    path, to the walked rest of the path. Goal task: distance (m) of the arg-max goal, of the nearest
    furniture ahead, and the *expected* distance of a uniformly random free cell (the random baseline
    averaged over all its draws). Returns per-sample arrays, the training seconds and one example.
    ``device`` (default :func:`companion_lib.common.device`) is where the U-Nets train and predict; the
    rasterising, the A* path extraction and the baselines stay on the CPU."""
    dev = resolve_device(device)
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
        net = train_unet(X, Y, steps=steps, batch=batch, width=width, seed=seed, device=dev)
        prob = predict_maps(net, Xp_test)
        chamfer[name] = path_chamfers(prob, test)
        Xg = np.ascontiguousarray(X[:, :-1])            # = rasterise(tr, res, with_goal=False)[0]
        gnet = train_unet(Xg, goal_targets(tr, res), loss="ce", steps=steps, batch=batch, width=width, seed=seed,
                          device=dev)
        gmap = predict_maps(gnet, Xg_test)
        pred = np.array([goal_from_map(m, o) for m, o in zip(gmap, occ_c)])
        goal[name] = goal_errors(pred, test)
        example[name] = {"path_prob": prob[0], "goal_map": gmap[0], "goal_pred": pred[0]}
        secs[name] = time.process_time() - t
    return {"chamfer": chamfer, "goal": goal, "example": example, "seconds": secs}
