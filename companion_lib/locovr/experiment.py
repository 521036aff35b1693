r"""The reproduce page's experiment: LocoVR-mini (many homes) vs THOR-mini (few homes) on unseen homes."""

from __future__ import annotations

import time

import numpy as np
import torch

from .metrics import ade_fde, min_separation, path_efficiency
from .tasks import constant_velocity, generate_dataset, make_samples, predict_trajectory, train_trajectory

__all__ = ["dataset_stats", "run_experiment"]


def dataset_stats(episodes) -> dict:
    """Path efficiency of person 1, minimum separation, speed and duration per episode."""
    eff = np.array([path_efficiency(e.p1) for e in episodes])
    sep = np.array([min_separation(e.p1, e.p2) for e in episodes])
    dur = np.array([(len(e.p1) - 1) / 15 for e in episodes])
    length = np.array([np.linalg.norm(np.diff(e.p1, axis=0), axis=1).sum() for e in episodes])
    return {"efficiency": eff, "min_sep": sep, "duration": dur, "speed": length / dur}


def run_experiment(seed: int, n_train: int = 160, many: int = 40, few: int = 4, n_test_layouts: int = 16,
                   n_test: int = 48, traj_steps: int = 600, interaction_m: float = 1.5) -> dict:
    """Trajectory task: MLPs trained on LocoVR-mini (many homes) and THOR-mini (few homes), with and
    without person 2's features, scored with constant velocity on unseen homes."""
    torch.set_num_threads(1)
    t0 = time.process_time()
    train = {"LocoVR-mini": generate_dataset(many, n_train, seed=10_000 + seed),
             "THOR-mini": generate_dataset(few, n_train, seed=20_000 + seed)}
    test_eps = generate_dataset(n_test_layouts, n_test, seed=30_000 + seed)
    test = make_samples(test_eps, per_episode=2, seed=seed)
    t_data = time.process_time() - t0
    # interaction subset: person 2 within interaction_m of person 1 at the cut time
    near = np.linalg.norm(test["past2"][:, -1] - test["past1"][:, -1], axis=1) < interaction_m
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
            rows.append({"model": "MLP", "train": name, "p2": use_p2, "ade": ade, "fde": fde,
                         "ade_near": ade_fde(pred[near], test["fut1"][near])[0] if near.any() else np.nan})
    return {"seed": seed, "rows": rows, "n_test": len(near), "n_near": int(near.sum()),
            "train_stats": dataset_stats(train["LocoVR-mini"]), "test_stats": dataset_stats(test_eps),
            "example": {"episode": test_eps[0]}, "t_data": t_data, "t_total": time.process_time() - t0}
