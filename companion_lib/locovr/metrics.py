r"""Metrics of the three LocoVR tasks and the data-set statistics."""

from __future__ import annotations

import numpy as np
from scipy.spatial.distance import cdist

__all__ = ["chamfer", "ade_fde", "path_efficiency", "min_separation", "goal_error"]


def _points(a: np.ndarray, name: str) -> np.ndarray:
    a = np.asarray(a, dtype=float)
    if a.ndim != 2 or a.shape[1] != 2 or len(a) == 0:
        raise ValueError(f"{name} must be a non-empty (n, 2) array of points, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return a


def chamfer(P: np.ndarray, Q: np.ndarray) -> float:
    r"""Symmetric mean Chamfer distance $\tfrac12(\overline{\min_q\|p-q\|}+\overline{\min_p\|p-q\|})$."""
    D = cdist(_points(P, "P"), _points(Q, "Q"))
    return float(0.5 * (D.min(axis=1).mean() + D.min(axis=0).mean()))


def ade_fde(pred: np.ndarray, true: np.ndarray) -> tuple[float, float]:
    r"""Average and final displacement error of trajectories (..., T, 2); averaged over leading axes."""
    pred, true = np.asarray(pred, dtype=float), np.asarray(true, dtype=float)
    if pred.shape != true.shape:
        raise ValueError(f"pred and true must have the same shape, got {pred.shape} and {true.shape}")
    if pred.ndim < 2 or pred.shape[-1] != 2:
        raise ValueError(f"trajectories must end in (T, 2), got {pred.shape}")
    err = np.linalg.norm(pred - true, axis=-1)
    return float(err.mean()), float(err[..., -1].mean())


def path_efficiency(traj: np.ndarray) -> float:
    r"""Straight-line distance from start to end over the travelled length (1 for a straight walk)."""
    traj = _points(traj, "traj")
    length = np.linalg.norm(np.diff(traj, axis=0), axis=1).sum()
    if length <= 0:
        raise ValueError("traj has zero length")
    return float(np.linalg.norm(traj[-1] - traj[0]) / length)


def min_separation(p1: np.ndarray, p2: np.ndarray) -> float:
    """Smallest distance between two people over an episode (trajectories of equal length)."""
    p1, p2 = _points(p1, "p1"), _points(p2, "p2")
    if len(p1) != len(p2):
        raise ValueError(f"p1 and p2 must have equal length, got {len(p1)} and {len(p2)}")
    return float(np.linalg.norm(p1 - p2, axis=1).min())


def goal_error(pred: np.ndarray, goal: np.ndarray) -> float:
    """Mean distance between predicted and true goals, (n, 2) each."""
    pred, goal = _points(pred, "pred"), _points(goal, "goal")
    if pred.shape != goal.shape:
        raise ValueError(f"pred and goal must have the same shape, got {pred.shape} and {goal.shape}")
    return float(np.linalg.norm(pred - goal, axis=1).mean())
